//! Server actions: the orchestration of `POST /servers/{id}/action` once
//! its body is parsed. A power action or a rebuild checks Nova's states,
//! sets its task state with a compare-and-set on vm_state, task state and
//! lock in the instance's cell database, records the instance action
//! (named as upstream) in the same transaction, and casts the action to
//! `compute.<host>` (the compute finishes it through the cell conductor);
//! when nothing will run it (the request spec's image not written, the
//! cast failed) the task state is put back. `lock` / `unlock` only write
//! the cell database. The policy rule of each is checked by the lookup.

use crate::compute_api::servers::access_ip::AccessIps;
use std::collections::BTreeMap;

use cell_mapping::db::server_actions::{ActionRecord, ActionRefused, ActionStart, RebuildChange};
use cell_mapping::CellMapping;
use fabric::rpc::{self, action, method, task_state as ts, vm_state as vs, RequestIds};
use serde_json::Value;

use crate::compute_api::db::SpecImage;
use crate::compute_api::error::{ApiError, ApiResult};
use crate::compute_api::images::{is_uuid_like, recorded_properties, BootNeeds};
use crate::compute_api::query_schema::{invalid_field, python_repr};
use crate::compute_api::servers::lookup::{find, Found};
use crate::compute_api::servers::model::Server;
use crate::compute_api::{App, Ctx};
use crate::image_props::ImageProps;

/// How one power action is checked and started.
pub struct Spec {
    /// The name in conflict messages (`stop`, `start`, …).
    name: &'static str,
    /// The policy rule.
    rule: &'static str,
    /// The instance action's name.
    action: &'static str,
    /// Allowed vm_states.
    vm_states: &'static [&'static str],
    /// Allowed task states (`None` = NULL).
    task_states: &'static [Option<&'static str>],
    /// The task state set.
    new_task: &'static str,
    /// The compute method cast.
    method: &'static str,
}

const NO_TASK: &[Option<&str>] = &[None];
/// Task states a hard reboot may interrupt (upstream's `ALLOW_REBOOT`).
const ALLOW_REBOOT: &[Option<&str>] = &[
    None,
    Some(ts::REBOOTING),
    Some(ts::REBOOT_STARTED),
    Some(ts::REBOOTING_HARD),
    Some(ts::RESUMING),
    Some(ts::UNPAUSING),
    Some(ts::PAUSING),
    Some(ts::SUSPENDING),
];

pub const STOP: Spec = Spec {
    name: "stop",
    rule: "os_compute_api:servers:stop",
    action: action::STOP,
    vm_states: &[vs::ACTIVE, vs::ERROR],
    task_states: NO_TASK,
    new_task: ts::POWERING_OFF,
    method: method::STOP_INSTANCE,
};
pub const START: Spec = Spec {
    name: "start",
    rule: "os_compute_api:servers:start",
    action: action::START,
    vm_states: &[vs::STOPPED],
    task_states: NO_TASK,
    new_task: ts::POWERING_ON,
    method: method::START_INSTANCE,
};
pub const SOFT_REBOOT: Spec = Spec {
    name: "reboot",
    rule: "os_compute_api:servers:reboot",
    action: action::REBOOT,
    vm_states: &[vs::ACTIVE],
    task_states: NO_TASK,
    new_task: ts::REBOOTING,
    method: method::REBOOT_INSTANCE,
};
pub const HARD_REBOOT: Spec = Spec {
    name: "reboot",
    rule: "os_compute_api:servers:reboot",
    action: action::REBOOT,
    vm_states: &[
        vs::ACTIVE,
        vs::STOPPED,
        vs::PAUSED,
        vs::SUSPENDED,
        vs::ERROR,
    ],
    task_states: ALLOW_REBOOT,
    new_task: ts::REBOOTING_HARD,
    method: method::REBOOT_INSTANCE,
};
pub const PAUSE: Spec = Spec {
    name: "pause",
    rule: "os_compute_api:os-pause-server:pause",
    action: action::PAUSE,
    vm_states: &[vs::ACTIVE],
    task_states: NO_TASK,
    new_task: ts::PAUSING,
    method: method::PAUSE_INSTANCE,
};
pub const UNPAUSE: Spec = Spec {
    name: "unpause",
    rule: "os_compute_api:os-pause-server:unpause",
    action: action::UNPAUSE,
    vm_states: &[vs::PAUSED],
    task_states: NO_TASK,
    new_task: ts::UNPAUSING,
    method: method::UNPAUSE_INSTANCE,
};
pub const SUSPEND: Spec = Spec {
    name: "suspend",
    rule: "os_compute_api:os-suspend-server:suspend",
    action: action::SUSPEND,
    vm_states: &[vs::ACTIVE],
    task_states: NO_TASK,
    new_task: ts::SUSPENDING,
    method: method::SUSPEND_INSTANCE,
};
pub const RESUME: Spec = Spec {
    name: "resume",
    rule: "os_compute_api:os-suspend-server:resume",
    action: action::RESUME,
    vm_states: &[vs::SUSPENDED],
    task_states: NO_TASK,
    new_task: ts::RESUMING,
    method: method::RESUME_INSTANCE,
};
pub const REBUILD: Spec = Spec {
    name: "rebuild",
    rule: "os_compute_api:servers:rebuild",
    action: action::REBUILD,
    vm_states: &[vs::ACTIVE, vs::STOPPED, vs::ERROR],
    task_states: NO_TASK,
    new_task: ts::REBUILDING,
    method: method::REBUILD_INSTANCE,
};

/// Checks and starts the power action `spec` on the server `id`, then
/// casts it to the server's compute.
pub async fn power(app: &App, ctx: &Ctx, id: &str, spec: &Spec) -> ApiResult<()> {
    start_action(app, ctx, id, spec, None).await.map(drop)
}

/// What a rebuild asks for, its body validated.
pub struct Rebuild {
    /// `imageRef` as given (an id, or what the image service resolves).
    pub image: String,
    /// A new name.
    pub name: Option<String>,
    /// Metadata replacing all the server's.
    pub metadata: Option<Vec<(String, String)>>,
    /// `accessIPv4` and `accessIPv6`.
    pub access_ips: AccessIps,
    /// The description (2.19; `Some(None)` clears it).
    pub description: Option<Option<String>>,
    /// The caller's key pair (2.54; `Some(None)` removes the server's).
    pub key_name: Option<Option<String>>,
    /// User data (2.57; `Some(None)` removes it).
    pub user_data: Option<Option<String>>,
    /// The hostname (2.90).
    pub hostname: Option<String>,
    /// Trusted certificates (2.63; `Some(None)` removes them).
    pub trusted_certs: Option<Option<Vec<String>>>,
}

/// Rebuilds the server `id` from `r.image` (which must exist, be visible
/// to the caller and fit the server's flavor) and returns the server as
/// the rebuild leaves it.
pub async fn rebuild(app: &App, ctx: &Ctx, id: &str, r: Rebuild) -> ApiResult<Server> {
    if r.trusted_certs.is_some() {
        // Nova: checked whenever the key is given, null included.
        let (_, s) = in_cell(app, ctx, id, REBUILD.rule, REBUILD.name).await?;
        app.authorize(
            ctx,
            "os_compute_api:servers:rebuild:trusted_certs",
            &s.project_id,
        )?;
    }
    // Nova: the caller's key pair (users own keys, projects servers).
    let key = match r.key_name {
        Some(Some(k)) => match app.db.keypair(ctx.user_id(), &k).await? {
            Some(kp) => Some(Some((kp.name, kp.public_key.unwrap_or_default()))),
            None => return Err(ApiError::BadRequest("Invalid key_name provided.".into())),
        },
        Some(None) => Some(None),
        None => None,
    };
    // The image must exist and be visible to the caller (checked before
    // anything changes).
    let (image_ref, properties) = match &app.images {
        Some(images) => {
            // Checked against the server's flavor, as Nova does.
            let (_, current) = in_cell(app, ctx, id, REBUILD.rule, REBUILD.name).await?;
            let (ram, disk) = current
                .flavor
                .map(|f| (f.memory_mb, f.root_gb))
                .unwrap_or_default();
            let needs = BootNeeds {
                claims: &ctx.claims,
                ram_mb: ram.max(0) as u64,
                disk_gb: disk.max(0) as u64,
            };
            // Nova's rebuild has its own words for an image it cannot find.
            let not_found = crate::image::LookupError::NotFound.to_string();
            let img = images.resolve(&r.image, needs).await.map_err(|e| match e {
                ApiError::BadRequest(m) if m == not_found => {
                    ApiError::BadRequest("Cannot find image for rebuild".into())
                }
                e => e,
            })?;
            (img.id, img.properties)
        }
        None if is_uuid_like(&r.image) => (r.image.clone(), BTreeMap::new()),
        // No image service: only an id will do (Nova's `image_id`).
        None => {
            return Err(invalid_field(
                "imageRef",
                &Value::String(r.image.clone()),
                &format!("{} is not a 'uuid'", python_repr(&r.image)),
            ))
        }
    };
    let spec_image = SpecImage {
        image_ref: image_ref.clone(),
        scheduling: ImageProps::from_image(&properties).map_err(ApiError::BadRequest)?,
        recorded: recorded_properties(&properties),
        key_name: key.as_ref().map(|k| k.as_ref().map(|k| k.0.clone())),
    };
    let change = RebuildChange {
        image_ref: image_ref.clone(),
        name: r.name.clone(),
        metadata: r.metadata.clone(),
        access_ip_v4: r.access_ips.v4.clone(),
        access_ip_v6: r.access_ips.v6.clone(),
        description: r.description.clone(),
        key: key.clone(),
        user_data: r.user_data.clone(),
        hostname: r.hostname.clone(),
        trusted_certs: r.trusted_certs.clone(),
    };
    let recorded = spec_image.recorded.clone();
    let mut s = start_action(app, ctx, id, &REBUILD, Some((change, spec_image))).await?;
    if key.is_some() {
        // This process may remember the key name it landed the server
        // with (shown without a read of the spec).
        app.db.forget_landed(id);
    }
    s.image_ref = image_ref;
    s.image_properties = recorded;
    s.name = r.name.unwrap_or(s.name);
    s.metadata = r.metadata.unwrap_or(s.metadata);
    s.access_ip_v4 = r.access_ips.v4.or(s.access_ip_v4);
    s.access_ip_v6 = r.access_ips.v6.or(s.access_ip_v6);
    s.description = r.description.unwrap_or(s.description);
    s.key_name = key.map(|k| k.map(|k| k.0)).unwrap_or(s.key_name);
    s.user_data = r.user_data.unwrap_or(s.user_data);
    s.hostname = r.hostname.or(s.hostname);
    s.trusted_certs = r.trusted_certs.unwrap_or(s.trusted_certs);
    s.task_state = Some(ts::REBUILDING.to_owned());
    s.updated_at = Some(chrono::Utc::now());
    Ok(s)
}

/// Locks the server `id` (with `reason`, from 2.73). Locking a locked
/// server is a no-op for its owner, as upstream.
pub async fn lock(app: &App, ctx: &Ctx, id: &str, reason: Option<&str>) -> ApiResult<()> {
    let (cell, s) = in_cell(app, ctx, id, "os_compute_api:os-lock-server:lock", "lock").await?;
    let is_owner = s.project_id == ctx.project_id();
    if s.locked && is_owner {
        return Ok(());
    }
    let by = if is_owner { "owner" } else { "admin" };
    set_lock(app, ctx, &cell, id, Some((by, reason)), action::LOCK).await
}

/// Unlocks the server `id`: one locked by an admin needs
/// `os-lock-server:unlock:unlock_override` to be unlocked by its owner.
pub async fn unlock(app: &App, ctx: &Ctx, id: &str) -> ApiResult<()> {
    let (cell, s) = in_cell(
        app,
        ctx,
        id,
        "os_compute_api:os-lock-server:unlock",
        "unlock",
    )
    .await?;
    let is_owner = s.project_id == ctx.project_id();
    let expected = match s.locked_by.as_deref() {
        Some("admin") => !is_owner,
        Some("owner") => is_owner,
        _ => true,
    };
    if !expected {
        app.authorize(
            ctx,
            "os_compute_api:os-lock-server:unlock:unlock_override",
            &s.project_id,
        )?;
    }
    set_lock(app, ctx, &cell, id, None, action::UNLOCK).await
}

/// Writes the lock (`Some((by, reason))`) or its removal, with the
/// instance action `action`.
async fn set_lock(
    app: &App,
    ctx: &Ctx,
    cell: &CellMapping,
    id: &str,
    lock: Option<(&str, Option<&str>)>,
    action: &str,
) -> ApiResult<()> {
    let global = format!("req-{}", uuid::Uuid::new_v4());
    let db = app.cells.db(cell).await?;
    if !db
        .api_set_lock(id, lock, &record(ctx, action, &global))
        .await?
    {
        return Err(ApiError::server_not_found(id));
    }
    Ok(())
}

/// `os-resetState` (admin): sets the server's vm_state to `vm_state`
/// (active or error) and clears its task state, recording a `resetState`
/// action; nothing is sent to the compute, as Nova.
pub async fn reset_state(app: &App, ctx: &Ctx, id: &str, vm_state: &str) -> ApiResult<()> {
    let (cell, _) = in_cell(
        app,
        ctx,
        id,
        "os_compute_api:os-admin-actions:reset_state",
        "os-resetState",
    )
    .await?;
    let global = format!("req-{}", uuid::Uuid::new_v4());
    let db = app.cells.db(&cell).await?;
    if !db
        .api_reset_state(id, vm_state, &record(ctx, action::RESET_STATE, &global))
        .await?
    {
        return Err(ApiError::server_not_found(id));
    }
    tracing::info!(instance = %id, vm_state, "server state reset");
    Ok(())
}

/// `restore` (`os-deferred-delete:restore`): Nova's restore of a
/// soft-deleted server. No server is ever soft-deleted here (Nova's
/// `reclaim_instance_interval` is not built: a delete is at once), so
/// every live server is in a vm_state it refuses: 409 in Nova's words.
pub async fn restore(app: &App, ctx: &Ctx, id: &str) -> ApiResult<()> {
    let (_, s) = in_cell(
        app,
        ctx,
        id,
        "os_compute_api:os-deferred-delete:restore",
        "restore",
    )
    .await?;
    Err(refused("restore", id, ActionRefused::VmState(s.vm_state)))
}

/// The 409 of a refused action, in Nova's words.
fn refused(spec_name: &str, id: &str, r: ActionRefused) -> ApiError {
    match r {
        ActionRefused::NotFound => ApiError::server_not_found(id),
        ActionRefused::Locked => ApiError::Conflict(format!("Instance {id} is locked")),
        ActionRefused::VmState(vm) => ApiError::Conflict(format!(
            "Cannot '{spec_name}' instance {id} while it is in vm_state {vm}"
        )),
        ActionRefused::TaskState(t) => ApiError::Conflict(format!(
            "Cannot '{spec_name}' instance {id} while it is in task_state {}",
            t.as_deref().unwrap_or("None")
        )),
    }
}

/// The server in its cell (`rule` checked on it), or a 409 for a build
/// not scheduled yet (`name`: the action in that message).
pub async fn in_cell(
    app: &App,
    ctx: &Ctx,
    id: &str,
    rule: &str,
    name: &str,
) -> ApiResult<(CellMapping, Server)> {
    match find(app, ctx, id, rule).await? {
        Found::Build(_) => Err(ApiError::Conflict(format!(
            "Cannot '{name}' instance {id} while it is in vm_state {}",
            vs::BUILDING
        ))),
        Found::Cell(cell, s) => Ok((cell, s)),
    }
}

fn record(ctx: &Ctx, action: &str, global: &str) -> ActionRecord {
    ActionRecord {
        action: action.to_owned(),
        request_id: ctx.request_id.clone(),
        global_request_id: global.to_owned(),
        user_id: ctx.user_id().to_owned(),
        project_id: ctx.project_id().to_owned(),
    }
}

/// Checks and starts a power action (or a rebuild, with its changes and
/// its image for the request spec), then casts it to the server's
/// compute. Returns the server as it was found.
async fn start_action(
    app: &App,
    ctx: &Ctx,
    id: &str,
    spec: &Spec,
    rebuild: Option<(RebuildChange, SpecImage)>,
) -> ApiResult<Server> {
    let (cell, s) = in_cell(app, ctx, id, spec.rule, spec.name).await?;
    // As upstream: the lock, then the host, then the states.
    if s.locked && !ctx.is_admin() {
        return Err(ApiError::Conflict(format!("Instance {id} is locked")));
    }
    let Some(host) = s.host.clone() else {
        return Err(ApiError::Conflict(format!("Instance {id} is not ready")));
    };
    if !spec.vm_states.contains(&s.vm_state.as_str()) {
        return Err(refused(spec.name, id, ActionRefused::VmState(s.vm_state)));
    }
    if !spec.task_states.contains(&s.task_state.as_deref()) {
        return Err(refused(
            spec.name,
            id,
            ActionRefused::TaskState(s.task_state),
        ));
    }
    let global = format!("req-{}", uuid::Uuid::new_v4());
    let (rebuild, spec_image) = rebuild.unzip();
    let image_ref = rebuild.as_ref().map(|r| r.image_ref.clone());
    let start = ActionStart {
        uuid: id.to_owned(),
        vm_states: spec.vm_states.iter().map(|v| (*v).to_owned()).collect(),
        task_states: spec
            .task_states
            .iter()
            .map(|t| t.map(str::to_owned))
            .collect(),
        new_task_state: spec.new_task.to_owned(),
        ignore_lock: ctx.is_admin(),
        record: record(ctx, spec.action, &global),
        rebuild,
    };
    let db = app.cells.db(&cell).await?;
    db.api_start_action(&start)
        .await?
        .map_err(|r| refused(spec.name, id, r))?;
    if let Some(image) = &spec_image {
        // The request spec follows the instance's new image (what the
        // views show of it from 2.98, what a later scheduling matches).
        if let Err(e) = app.db.set_spec_image(id, image).await {
            // Nothing will run the action: do not leave its task state set.
            if let Err(re) = db.api_revert_task_state(id, spec.new_task).await {
                tracing::warn!(instance = %id, error = %re, "could not clear the task state");
            }
            return Err(e);
        }
    }
    let bus = app.cells.bus(&cell).await?;
    let ids = RequestIds {
        request_id: ctx.request_id.clone(),
        global_request_id: global,
    };
    let msg = rpc::InstanceActionRequest {
        instance_uuid: id.to_owned(),
        request_id: ids.request_id.clone(),
        global_request_id: ids.global_request_id.clone(),
        reboot_type: if spec.new_task == ts::REBOOTING_HARD {
            "HARD".into()
        } else if spec.new_task == ts::REBOOTING {
            "SOFT".into()
        } else {
            String::new()
        },
        image_ref: image_ref.unwrap_or_default(),
        original_vm_state: s.vm_state.clone(),
    };
    if let Err(e) = rpc::cast(
        bus.as_ref(),
        &rpc::compute_queue(&host),
        spec.method,
        &msg,
        &ids,
        rpc::ACTION_CAST_TTL,
    )
    .await
    {
        // Nothing will finish the action: do not leave its task state set.
        if let Err(re) = db.api_revert_task_state(id, spec.new_task).await {
            tracing::warn!(instance = %id, error = %re, "could not clear the task state");
        }
        return Err(ApiError::internal(e));
    }
    tracing::info!(instance = %id, action = spec.action, host = %host, "server action cast");
    Ok(s)
}
