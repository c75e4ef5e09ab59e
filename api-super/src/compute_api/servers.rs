//! `/servers`: create, list (multi-cell merge), show, rename, delete.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
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
}

impl Server {
    /// A build request not scheduled yet, as the instance it will be.
    pub(crate) fn from_build(b: &BuildInstance) -> Self {
        let mut s = Server::from_cell(super::server_list::build_as_instance(b));
        s.flavor = Some(b.flavor.clone());
        s.key_name = b.key_name.clone();
        s.metadata = b.metadata.clone();
        s
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
            key_name: None,
            reservation_id: i.reservation_id,
            launch_index: i.launch_index,
            user_data: i.user_data,
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
}

/// A server's `image`: `{id, links}`, or `""` when it has none.
struct ImageView<'a> {
    base: &'a str,
    image_ref: &'a str,
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
                extra_specs: Empty,
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
    extra_specs: Empty,
}

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
            &ImageView {
                base,
                image_ref: &s.image_ref,
            },
        )?;
        m.serialize_entry(
            "flavor",
            &FlavorView {
                base,
                ctx,
                flavor: s.flavor.as_ref(),
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
            m.serialize_entry("OS-EXT-SRV-ATTR:instance_name", "")?;
            if ctx.mv.at_least(3) {
                m.serialize_entry("OS-EXT-SRV-ATTR:reservation_id", &s.reservation_id)?;
                m.serialize_entry("OS-EXT-SRV-ATTR:launch_index", &s.launch_index)?;
                // The cell keeps the display name as the hostname.
                m.serialize_entry("OS-EXT-SRV-ATTR:hostname", &s.name)?;
                m.serialize_entry("OS-EXT-SRV-ATTR:kernel_id", "")?;
                m.serialize_entry("OS-EXT-SRV-ATTR:ramdisk_id", "")?;
                m.serialize_entry("OS-EXT-SRV-ATTR:root_device_name", &None::<&str>)?;
                m.serialize_entry("OS-EXT-SRV-ATTR:user_data", &s.user_data)?;
            }
        }
        if ctx.mv.at_least(9) {
            m.serialize_entry("locked", &s.locked)?;
        }
        if ctx.mv.at_least(19) {
            m.serialize_entry("description", &None::<&str>)?;
        }
        if ctx.mv.at_least(26) {
            m.serialize_entry("tags", &s.tags)?;
        }
        if ctx.mv.at_least(73) {
            m.serialize_entry("locked_reason", &s.locked_reason)?;
        }
        if ctx.mv.at_least(96) {
            m.serialize_entry("pinned_availability_zone", &None::<&str>)?;
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
                &ImageView {
                    base,
                    image_ref: &d.image_ref,
                },
            )?;
            m.serialize_entry(
                "flavor",
                &FlavorView {
                    base,
                    ctx,
                    flavor: Some(&d.flavor),
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
    servers: impl IntoIterator<Item = &'a mut Server>,
) -> ApiResult<()> {
    let mut servers: Vec<&mut Server> = servers.into_iter().collect();
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
                    s.key_name = app
                        .db
                        .key_names(std::slice::from_ref(&s.uuid))
                        .await?
                        .remove(&s.uuid);
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
}

/// A requested destination names a compute host (and node) the scheduler
/// knows, as upstream checks before it accepts the create: Nova's 400
/// "Compute host … could not be found." otherwise.
async fn check_destination(app: &App, host: Option<&str>, node: Option<&str>) -> ApiResult<()> {
    let hosts = app.conductor().scheduler().host_state().get().await?;
    let known = hosts.by_provider.values().any(|h| h.is_named(host, node));
    if known {
        return Ok(());
    }
    let name = host.or(node).unwrap_or_default();
    Err(bad(format!("Compute host {name} could not be found.")))
}

/// Nova's limit on `user_data` (characters of its base64).
const MAX_USER_DATA: usize = 65535;

fn int_field(o: &serde_json::Map<String, Value>, key: &str) -> ApiResult<Option<i64>> {
    match o.get(key) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .filter(|v| *v >= 1)
            .map(Some)
            .ok_or_else(|| bad(format!("Invalid input for field/attribute {key}. Value: {n}. {n} is less than the minimum of 1"))),
        Some(Value::String(s)) if s.bytes().all(|b| b.is_ascii_digit()) && !s.is_empty() => {
            let v: i64 = s.parse().map_err(|_| bad(format!("Invalid input for field/attribute {key}.")))?;
            if v < 1 {
                return Err(bad(format!("Invalid input for field/attribute {key}. Value: {s}. {s} is less than the minimum of 1")));
            }
            Ok(Some(v))
        }
        Some(v) => Err(bad(format!(
            "Invalid input for field/attribute {key}. Value: {v}. {v} is not of type 'integer', 'string'"
        ))),
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
            return Err(bad(format!("Invalid input for field/attribute networks. Value: {item}. {item} is not of type 'object'")));
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
                Some(other) => return Err(bad(format!("Invalid input for field/attribute {key}. Value: {other}. {other} is not of type 'string'"))),
            }
        }
        if let Some(port) = m.get("port").and_then(Value::as_str) {
            if uuid::Uuid::parse_str(port).is_err() {
                return Err(bad(format!("Invalid input for field/attribute port. Value: {port}. '{port}' is not a 'uuid'")));
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

fn parse_create(ctx: &Ctx, body: &[u8]) -> ApiResult<CreateRequest> {
    let v: Value = serde_json::from_slice(body).map_err(|_| bad("Malformed request body"))?;
    let Some(server) = v.get("server") else {
        return Err(bad("Invalid input for field/attribute server. Value: None. 'server' is a required property"));
    };
    let Some(o) = server.as_object() else {
        return Err(bad(format!("Invalid input for field/attribute server. Value: {server}. {server} is not of type 'object'")));
    };
    let name = match o.get("name") {
        Some(Value::String(s)) => {
            let t = s.trim();
            if t.is_empty() || s.chars().count() > 255 || t.len() != s.len() {
                return Err(bad(format!("Invalid input for field/attribute name. Value: {s}. '{s}' does not match the name pattern")));
            }
            s.clone()
        }
        Some(other) => return Err(bad(format!("Invalid input for field/attribute name. Value: {other}. {other} is not of type 'string'"))),
        None => return Err(bad("Invalid input for field/attribute server. 'name' is a required property")),
    };
    let flavor_ref = match o.get("flavorRef") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::Number(n)) if n.is_i64() => n.to_string(),
        Some(other) => return Err(bad(format!("Invalid input for field/attribute flavorRef. Value: {other}. {other} is not of type 'string', 'integer'"))),
        None => return Err(bad("Invalid input for field/attribute server. 'flavorRef' is a required property")),
    };
    let image_ref = match o.get("imageRef") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(bad(format!("Invalid input for field/attribute imageRef. Value: {other}. {other} is not of type 'string'"))),
        // Boot from volume is not built: an image is required.
        None => return Err(bad("Invalid input for field/attribute server. 'imageRef' is a required property")),
    };
    let availability_zone = match o.get("availability_zone") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(other) => return Err(bad(format!("Invalid input for field/attribute availability_zone. Value: {other}. {other} is not of type 'string'"))),
    };
    match o.get("networks") {
        // Before 2.37 `networks` is optional (and a string is tolerated).
        None if !ctx.mv.at_least(37) => {}
        Some(Value::String(_)) if !ctx.mv.at_least(37) => {}
        None => return Err(bad("Invalid input for field/attribute server. 'networks' is a required property")),
        Some(Value::String(s)) if s == "auto" || s == "none" => {}
        Some(Value::Array(items)) => check_requested_networks(items)?,
        Some(other) => return Err(bad(format!("Invalid input for field/attribute networks. Value: {other}. {other} is not valid under any of the given schemas"))),
    }
    let key_name = match o.get("key_name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= 255 => Some(s.clone()),
        Some(other) => return Err(bad(format!("Invalid input for field/attribute key_name. Value: {other}. {other} is not of type 'string', 'null'"))),
    };
    let metadata = match o.get("metadata") {
        None => Vec::new(),
        Some(m) => super::server_metadata::validate_metadata(m, "metadata")?,
    };
    let user_data = match o.get("user_data") {
        None | Some(Value::Null) => None,
        Some(Value::String(u)) if u.chars().count() > MAX_USER_DATA => {
            return Err(bad(format!("Invalid input for field/attribute user_data. Value: {u}. '{u}' is too long")))
        }
        Some(Value::String(u)) => {
            use base64::Engine;
            if base64::engine::general_purpose::STANDARD.decode(u.trim()).is_err() {
                return Err(bad(format!("Invalid input for field/attribute user_data. Value: {u}. '{u}' is not a 'base64'")));
            }
            Some(u.clone())
        }
        Some(other) => return Err(bad(format!("Invalid input for field/attribute user_data. Value: {other}. {other} is not of type 'string'"))),
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
            Some(other) => return Err(bad(format!("Invalid input for field/attribute {key}. Value: {other}. {other} is not a valid hostname"))),
        }
    }
    let [requested_host, requested_node] = destination;
    let min_count = int_field(o, "min_count")?.unwrap_or(1);
    let max_count = int_field(o, "max_count")?.unwrap_or(min_count);
    if min_count > max_count {
        return Err(bad("min_count must be <= max_count"));
    }
    if max_count > 1000 {
        return Err(bad("max_count is too large"));
    }
    let group = super::server_groups::group_hint(&v)?;
    Ok(CreateRequest {
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
        .ok_or_else(|| bad("Invalid flavorRef provided."))?;
    let (flavor, extra_specs) = (reads.flavor, reads.extra_specs);
    if let Some(k) = &req.key_name {
        if app.db.keypair(ctx.user_id(), k).await?.is_none() {
            return Err(bad("Invalid key_name provided."));
        }
    }
    let (limits, group_members_limit) =
        super::quotas::create_limits(&app, reads.quotas, req.metadata.len())?;
    let (image_ref, image_props) = match &app.images {
        Some(images) => {
            let needs = super::images::BootNeeds {
                claims: &ctx.claims,
                ram_mb: flavor.memory_mb.max(0) as u64,
                disk_gb: flavor.root_gb.max(0) as u64,
            };
            let img = images.resolve(&req.image_ref, needs).await.map_err(bad)?;
            let props = ImageProps::from_image(&img.properties).map_err(bad)?;
            (img.id, props)
        }
        None if is_uuid_like(&req.image_ref) => (req.image_ref.clone(), ImageProps::default()),
        None => return Err(bad("Invalid imageRef provided.")),
    };
    // `az`, `az:host`, `az:host:node`, `:host` (forced host: admins).
    let (availability_zone, force_host) = match req.availability_zone.as_deref() {
        None => (None, None),
        Some(z) => match z.split_once(':') {
            None => (Some(z.to_owned()), None),
            Some((az, rest)) => {
                app.authorize(
                    &ctx,
                    "os_compute_api:servers:create:forced_host",
                    ctx.project_id(),
                )?;
                let host = rest.split(':').next().unwrap_or("").to_owned();
                (
                    (!az.is_empty()).then(|| az.to_owned()),
                    (!host.is_empty()).then_some(host),
                )
            }
        },
    };
    if req.requested_host.is_some() || req.requested_node.is_some() {
        app.authorize(
            &ctx,
            "os_compute_api:servers:create:requested_destination",
            ctx.project_id(),
        )?;
        check_destination(
            &app,
            req.requested_host.as_deref(),
            req.requested_node.as_deref(),
        )
        .await?;
    }
    let group = match &req.group {
        Some(g) => Some(super::server_groups::for_boot(&app, &ctx, g).await?),
        None => None,
    };
    let created_at = Utc::now();
    let reservation_id = format!("r-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let n = req.max_count;
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
                    requested_host: req.requested_host.clone(),
                    requested_node: req.requested_node.clone(),
                    request_id: ctx.request_id.clone(),
                    global_request_id: global.clone(),
                    key_name: req.key_name.clone(),
                    in_group: Some(req.group.is_some()),
                    image_properties: image_props.clone(),
                    flavor_extra_specs: Some(extra_specs.clone()),
                },
            )
        })
        .collect();
    let _ = req.min_count;
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
    let admin_pass: String = {
        use rand::Rng;
        let mut r = rand::thread_rng();
        const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
        (0..12)
            .map(|_| ALPHABET[r.gen_range(0..ALPHABET.len())] as char)
            .collect()
    };
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
) -> ApiResult<Json<Value>> {
    let mut s = match locate_with(&app, &ctx, &id, "os_compute_api:servers:show", false).await? {
        Located::Found(Found::Cell(_, mut s)) => {
            // Landed here outside any group: the key name was remembered
            // and there is no group; otherwise both are read (one
            // statement). The zone comes from the hosts' zone cache, as in
            // lists.
            let groups = match app.db.landed_key_name(&s.uuid) {
                Some(key_name) => {
                    s.key_name = key_name;
                    Vec::new()
                }
                None => {
                    let x = app.db.show_extras(&s.uuid).await?;
                    s.key_name = x.key_name;
                    x.group_uuid.into_iter().collect()
                }
            };
            current_zones(&app, std::slice::from_mut(&mut s)).await?;
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
    current_zones(&app, std::slice::from_mut(&mut s)).await?;
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
            availability_zone: spec.availability_zone,
            server_groups,
        }),
    })
}

/// `PUT /servers/{id}` (the name).
pub async fn update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let v: Value = serde_json::from_slice(&body).map_err(|_| bad("Malformed request body"))?;
    let Some(o) = v.get("server").and_then(|s| s.as_object()) else {
        return Err(bad(
            "Invalid input for field/attribute server. 'server' is a required property",
        ));
    };
    let name = match o.get("name") {
        None => None,
        Some(Value::String(s)) if !s.trim().is_empty() && s.chars().count() <= 255 => {
            Some(s.clone())
        }
        Some(other) => {
            return Err(bad(format!(
                "Invalid input for field/attribute name. Value: {other}."
            )))
        }
    };
    match find(&app, &ctx, &id, "os_compute_api:servers:update").await? {
        Found::Build(_) => Err(ApiError::Conflict(format!(
            "Cannot 'update' instance {id} while it is in vm_state building"
        ))),
        Found::Cell(cell, mut s) => {
            current_zones(&app, std::slice::from_mut(&mut s)).await?;
            if let Some(n) = name {
                let db = app.cells.db(&cell).await?;
                if !db.api_rename(&id, &n).await? {
                    return Err(ApiError::server_not_found(&id));
                }
                s.name = n;
                s.updated_at = Some(Utc::now());
            }
            let mut body = detail_view(&app, &ctx, &s);
            add_server_groups(&app, &ctx, &s.uuid, &mut body).await?;
            Ok(Json(json!({ "server": body })))
        }
    }
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
