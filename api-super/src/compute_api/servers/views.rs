//! The JSON shapes of servers: the detail and brief views, partial
//! records of servers in a down cell (2.69), and their pieces, written
//! straight into the answer.

use std::collections::BTreeMap;

use cell_mapping::db::InstanceFlavor;
use chrono::{DateTime, Utc};
use fabric::rpc::power_state;
use serde_json::{json, Value};

use super::model::{iso, Server};
use crate::compute_api::db::MappingRow;
use crate::compute_api::error::ApiResult;
use crate::compute_api::{App, Ctx};

pub(crate) fn links(app: &App, kind: &str, id: &str) -> Value {
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
        m.serialize_entry("accessIPv4", s.access_ip_v4.as_deref().unwrap_or(""))?;
        m.serialize_entry("accessIPv6", s.access_ip_v6.as_deref().unwrap_or(""))?;
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
        m.serialize_entry("config_drive", &s.config_drive)?;
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
            m.serialize_entry("trusted_image_certificates", &s.trusted_certs)?;
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
    let (zones, default) = crate::compute_api::services::host_zones(app).await?;
    for s in servers.iter_mut() {
        if let Some(h) = &s.host {
            s.availability_zone = Some(zones.get(h).cloned().unwrap_or_else(|| default.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
}
