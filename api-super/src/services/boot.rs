//! Boot: the orchestration of a create once its body is parsed and the
//! create is authorized. Reads the flavor (with its extra specs and the
//! project's quotas), key pair and image, checks the zone and the hosts
//! asked for, fits `min_count`..`max_count` in the quota, writes the build
//! requests (quota and group membership checked in that transaction) and
//! hands them to the super-conductor, which schedules and builds them in
//! the background.

use std::collections::BTreeMap;

use chrono::Utc;
use serde_json::Value;

use crate::compute_api::db::{BuildInstance, GroupJoin, RequestSpec};
use crate::compute_api::error::{ApiError, ApiResult};
use crate::compute_api::images::is_uuid_like;
use crate::compute_api::query_schema::{self, invalid_field};
use crate::compute_api::servers::schema::{
    bad, parse_availability_zone, sanitize_hostname, CreateRequest,
};
use crate::compute_api::{App, Ctx};
use crate::image_props::ImageProps;

/// The servers a create accepted: their uuids (in launch order) and the
/// reservation id they share.
pub struct Booted {
    pub uuids: Vec<String>,
    pub reservation_id: String,
}

/// Accepts the create `req` of `ctx`'s caller (already allowed
/// `os_compute_api:servers:create`; the checks that depend on what is
/// read, such as a zero-disk flavor's or a forced host's, are made here):
/// the builds are written when this returns, and scheduled in a task of
/// this process.
pub async fn boot(app: &App, ctx: &Ctx, req: &CreateRequest) -> ApiResult<Booted> {
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
    let quota_reads = crate::compute_api::quotas::QuotaReads {
        project: reads.quotas,
        class_defaults: reads.class_defaults,
        users: reads.user_quotas,
    };
    // Nova checks its policy only when certificates are given.
    if req.trusted_certs.is_some() {
        app.authorize(
            ctx,
            "os_compute_api:servers:create:trusted_certs",
            ctx.project_id(),
        )?;
    }
    // A flavor without a root disk boots only volume-backed servers
    // (not built here), except for whom the policy allows (admins), as
    // Nova.
    if flavor.root_gb == 0
        && app
            .authorize(
                ctx,
                "os_compute_api:servers:create:zero_disk_flavor",
                ctx.project_id(),
            )
            .is_err()
    {
        return Err(ApiError::Forbidden(
            "Only volume-backed servers are allowed for flavors with zero disk.".into(),
        ));
    }
    let key_data = match &req.key_name {
        Some(k) => match app.db.keypair(ctx.user_id(), k).await? {
            Some(kp) => kp.public_key.map(|pk| (kp.kind, pk)),
            None => return Err(bad("Invalid key_name provided.")),
        },
        None => None,
    };
    let (limits, group_members_limit) = crate::compute_api::quotas::create_limits(
        app,
        &quota_reads,
        ctx.user_id(),
        req.metadata.len(),
    )?;
    let (image_ref, image_props, recorded_props) = match &app.images {
        Some(images) => {
            let needs = crate::compute_api::images::BootNeeds {
                claims: &ctx.claims,
                ram_mb: flavor.memory_mb.max(0) as u64,
                disk_gb: flavor.root_gb.max(0) as u64,
            };
            let img = images.resolve(&req.image_ref, needs).await?;
            let props = ImageProps::from_image(&img.properties).map_err(bad)?;
            let recorded = crate::compute_api::images::recorded_properties(&img.properties);
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
            ctx,
            "os_compute_api:servers:create:forced_host",
            ctx.project_id(),
        )?;
    }
    if req.requested_host.is_some() || req.requested_node.is_some() {
        app.authorize(
            ctx,
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
        Some(g) => Some(crate::compute_api::server_groups::for_boot(app, ctx, g).await?),
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
        let each = (1, flavor.vcpus, flavor.memory_mb);
        let used = app.db.instance_usage(ctx.project_id()).await?;
        let mut fit = limits.fit(used, each);
        if let Some(u) = limits.user {
            let mine = app
                .db
                .user_instance_usage(ctx.project_id(), ctx.user_id())
                .await?;
            fit = fit.min(u.fit(mine, each));
        }
        if fit >= req.min_count {
            n = n.min(fit);
        }
    }
    // Nova's `configdrive.required_by`: asked for, or the image's
    // `img_config_drive=mandatory`.
    let config_drive = req.config_drive
        || recorded_props.get("img_config_drive").map(String::as_str) == Some("mandatory");
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
                    config_drive,
                    key_data: key_data.clone(),
                    access_ip_v4: req.access_ips.v4.clone(),
                    access_ip_v6: req.access_ips.v6.clone(),
                    trusted_certs: req.trusted_certs.clone(),
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
    // A place among the creates being scheduled, before anything is
    // written: a full scheduler refuses the create, it does not queue it.
    let conductor = app.conductor();
    let Some(slot) = conductor.reserve_create().await else {
        return Err(ApiError::Unavailable(format!(
            "The scheduler is handling its limit of {} server creates at once; try again.",
            conductor.max_pending_creates()
        )));
    };
    app.db
        .create_builds(&builds, Some(&limits), join.as_ref())
        .await?;
    conductor.spawn_create(slot, builds);
    Ok(Booted {
        uuids,
        reservation_id,
    })
}
