//! `POST /servers/{id}/action`: `os-stop`, `os-start`, `reboot`, `pause`,
//! `unpause`, `suspend`, `resume`, `rebuild`, `lock`, `unlock`,
//! `forceDelete`.
//!
//! Each power action checks Nova's states, sets its task state with a
//! compare-and-set on vm_state, task state and lock in the instance's cell
//! database, records the instance action (named as upstream) in the same
//! transaction, and casts the action to `compute.<host>`; the compute
//! finishes it through the cell conductor. `lock` / `unlock` only write the
//! cell database. Other upstream actions (resize, shelve, migrate, …) and
//! `restore` (there is no soft delete) answer 400 "There is no such action".

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cell_mapping::db::server_actions::{ActionRecord, ActionRefused, ActionStart, RebuildChange};
use fabric::rpc::{self, action, method, task_state as ts, vm_state as vs, RequestIds};
use serde_json::{json, Map, Value};

use crate::scheduler::filters::image_properties::ImageProps;

use super::db::SpecImage;
use super::error::{ApiError, ApiResult};
use super::images::{is_uuid_like, recorded_properties};
use super::query_schema::{
    invalid_field, not_of_type, python_repr, python_value_repr as py_repr, too_long,
};
use super::server_metadata::validate_metadata;
use super::servers::add_server_groups;
use super::servers::lookup::{find, Found};
use super::servers::model::Server;
use super::servers::views::detail_view;
use super::{App, Ctx};
use crate::services::delete::delete_server;

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// How one power action is checked and started.
struct Spec {
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

const STOP: Spec = Spec {
    name: "stop",
    rule: "os_compute_api:servers:stop",
    action: action::STOP,
    vm_states: &[vs::ACTIVE, vs::ERROR],
    task_states: NO_TASK,
    new_task: ts::POWERING_OFF,
    method: method::STOP_INSTANCE,
};
const START: Spec = Spec {
    name: "start",
    rule: "os_compute_api:servers:start",
    action: action::START,
    vm_states: &[vs::STOPPED],
    task_states: NO_TASK,
    new_task: ts::POWERING_ON,
    method: method::START_INSTANCE,
};
const SOFT_REBOOT: Spec = Spec {
    name: "reboot",
    rule: "os_compute_api:servers:reboot",
    action: action::REBOOT,
    vm_states: &[vs::ACTIVE],
    task_states: NO_TASK,
    new_task: ts::REBOOTING,
    method: method::REBOOT_INSTANCE,
};
const HARD_REBOOT: Spec = Spec {
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
const PAUSE: Spec = Spec {
    name: "pause",
    rule: "os_compute_api:os-pause-server:pause",
    action: action::PAUSE,
    vm_states: &[vs::ACTIVE],
    task_states: NO_TASK,
    new_task: ts::PAUSING,
    method: method::PAUSE_INSTANCE,
};
const UNPAUSE: Spec = Spec {
    name: "unpause",
    rule: "os_compute_api:os-pause-server:unpause",
    action: action::UNPAUSE,
    vm_states: &[vs::PAUSED],
    task_states: NO_TASK,
    new_task: ts::UNPAUSING,
    method: method::UNPAUSE_INSTANCE,
};
const SUSPEND: Spec = Spec {
    name: "suspend",
    rule: "os_compute_api:os-suspend-server:suspend",
    action: action::SUSPEND,
    vm_states: &[vs::ACTIVE],
    task_states: NO_TASK,
    new_task: ts::SUSPENDING,
    method: method::SUSPEND_INSTANCE,
};
const RESUME: Spec = Spec {
    name: "resume",
    rule: "os_compute_api:os-suspend-server:resume",
    action: action::RESUME,
    vm_states: &[vs::SUSPENDED],
    task_states: NO_TASK,
    new_task: ts::RESUMING,
    method: method::RESUME_INSTANCE,
};
const REBUILD: Spec = Spec {
    name: "rebuild",
    rule: "os_compute_api:servers:rebuild",
    action: action::REBUILD,
    vm_states: &[vs::ACTIVE, vs::STOPPED, vs::ERROR],
    task_states: NO_TASK,
    new_task: ts::REBUILDING,
    method: method::REBUILD_INSTANCE,
};

/// `POST /servers/{id}/action`.
pub async fn action(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let v: Value = serde_json::from_slice(&body).map_err(|_| bad("Malformed request body"))?;
    let Some(o) = v.as_object().filter(|o| o.len() == 1) else {
        return Err(bad("Malformed request body"));
    };
    let Some((name, arg)) = o.iter().next() else {
        return Err(bad("Malformed request body"));
    };
    match name.as_str() {
        "os-stop" => {
            null_body(name, arg)?;
            power(&app, &ctx, &id, &STOP).await
        }
        "os-start" => {
            null_body(name, arg)?;
            power(&app, &ctx, &id, &START).await
        }
        "reboot" => {
            let hard = reboot_type(arg)?;
            let spec = if hard { &HARD_REBOOT } else { &SOFT_REBOOT };
            power(&app, &ctx, &id, spec).await
        }
        "pause" => {
            null_body(name, arg)?;
            power(&app, &ctx, &id, &PAUSE).await
        }
        "unpause" => {
            null_body(name, arg)?;
            power(&app, &ctx, &id, &UNPAUSE).await
        }
        "suspend" => {
            null_body(name, arg)?;
            power(&app, &ctx, &id, &SUSPEND).await
        }
        "resume" => {
            null_body(name, arg)?;
            power(&app, &ctx, &id, &RESUME).await
        }
        "rebuild" => rebuild(&app, &ctx, &id, arg).await,
        "os-getConsoleOutput" => super::server_console::console_output(&app, &ctx, &id, arg).await,
        "os-getSerialConsole" => {
            super::server_console::get_serial_console(&app, &ctx, &id, arg).await
        }
        "lock" => lock(&app, &ctx, &id, arg).await,
        "unlock" => {
            null_body(name, arg)?;
            unlock(&app, &ctx, &id).await
        }
        "forceDelete" => {
            null_body(name, arg)?;
            delete_server(
                &app,
                &ctx,
                &id,
                "os_compute_api:os-deferred-delete:force_delete",
            )
            .await?;
            Ok(StatusCode::ACCEPTED.into_response())
        }
        other => Err(bad(format!("There is no such action: {other}"))),
    }
}

/// The actions whose body is `null` (clients also send `{}`).
fn null_body(name: &str, arg: &Value) -> ApiResult<()> {
    match arg {
        Value::Null => Ok(()),
        Value::Object(m) if m.is_empty() => Ok(()),
        // Nova's schemas for these actions take any value (`{}`, with a
        // TODO to restrict it to null); this region refuses anything else
        // than null or `{}`, in JSON Schema's words for a `null` type.
        other => Err(invalid_field(name, other, &not_of_type(other, "'null'"))),
    }
}

/// `{"reboot": {"type": "SOFT" | "HARD"}}`: whether it is hard.
fn reboot_type(arg: &Value) -> ApiResult<bool> {
    let Some(o) = arg.as_object() else {
        return Err(invalid_field("reboot", arg, &not_of_type(arg, "'object'")));
    };
    // Nova's schema order: properties, required, additionalProperties.
    match o.get("type") {
        Some(t) if !t.is_string() => {
            return Err(invalid_field("type", t, &not_of_type(t, "'string'")));
        }
        None => {
            return Err(invalid_field(
                "reboot",
                arg,
                "'type' is a required property",
            ));
        }
        _ => {}
    }
    if let Some(k) = o.keys().find(|k| k.as_str() != "type") {
        return Err(invalid_field(
            "reboot",
            arg,
            &format!(
                "Additional properties are not allowed ({} was unexpected)",
                python_repr(k)
            ),
        ));
    }
    match &o["type"] {
        Value::String(t) if t.eq_ignore_ascii_case("HARD") => Ok(true),
        Value::String(t) if t.eq_ignore_ascii_case("SOFT") => Ok(false),
        t => Err(invalid_field(
            "type",
            t,
            &format!(
                "{} is not one of ['HARD', 'Hard', 'hard', 'SOFT', 'Soft', 'soft']",
                py_repr(t)
            ),
        )),
    }
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

/// The server in its cell, or a 409 for a build not scheduled yet.
async fn in_cell(
    app: &App,
    ctx: &Ctx,
    id: &str,
    rule: &str,
    name: &str,
) -> ApiResult<(cell_mapping::CellMapping, Server)> {
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

async fn power(app: &App, ctx: &Ctx, id: &str, spec: &Spec) -> ApiResult<Response> {
    start_action(app, ctx, id, spec, None).await?;
    Ok(StatusCode::ACCEPTED.into_response())
}

/// Keys a rebuild accepts (the others of upstream's schema are not built).
const REBUILD_KEYS: &[&str] = &[
    "imageRef",
    "name",
    "metadata",
    "adminPass",
    "preserve_ephemeral",
    "OS-DCF:diskConfig",
    "accessIPv4",
    "accessIPv6",
    "description",
];

/// `rebuild`: `imageRef` (required), `name`, `metadata` (replaces all).
async fn rebuild(app: &App, ctx: &Ctx, id: &str, arg: &Value) -> ApiResult<Response> {
    let Some(o) = arg.as_object() else {
        return Err(invalid_field("rebuild", arg, &not_of_type(arg, "'object'")));
    };
    // Errors about the `rebuild` object itself leave out Nova's
    // `Value: {…}`, which would print `adminPass` into the message.
    if let Some(k) = o.keys().find(|k| !REBUILD_KEYS.contains(&k.as_str())) {
        return Err(bad(format!(
            "Invalid input for field/attribute rebuild. Additional properties are not allowed ({} was unexpected)",
            python_repr(k)
        )));
    }
    let image = match o.get("imageRef") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(v @ Value::String(_)) => {
            return Err(invalid_field("imageRef", v, "'' is not a 'uuid'"))
        }
        Some(other) => {
            return Err(invalid_field(
                "imageRef",
                other,
                &not_of_type(other, "'string'"),
            ))
        }
        None => {
            return Err(bad(
                "Invalid input for field/attribute rebuild. 'imageRef' is a required property",
            ))
        }
    };
    // Nova's rebuild schema has the create's `parameter_types.name`.
    let name = o
        .get("name")
        .map(super::servers::schema::name_field)
        .transpose()?;
    let metadata = match o.get("metadata") {
        None => None,
        Some(m) => Some(validate_metadata(m, "metadata")?),
    };
    if ctx.mv.at_least(19) {
        // Nova's `parameter_types.description`, as at create.
        super::servers::schema::description_field(o)?;
    } else if o.contains_key("description") {
        return Err(bad(
            "Invalid input for field/attribute rebuild. Additional properties are not allowed ('description' was unexpected)",
        ));
    }
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
            let needs = super::images::BootNeeds {
                claims: &ctx.claims,
                ram_mb: ram.max(0) as u64,
                disk_gb: disk.max(0) as u64,
            };
            // Nova's rebuild has its own words for an image it cannot find.
            let not_found = crate::image::LookupError::NotFound.to_string();
            let img = images.resolve(&image, needs).await.map_err(|e| match e {
                ApiError::BadRequest(m) if m == not_found => bad("Cannot find image for rebuild"),
                e => e,
            })?;
            (img.id, img.properties)
        }
        None if is_uuid_like(&image) => (image, BTreeMap::new()),
        // No image service: only an id will do (Nova's `image_id`).
        None => {
            return Err(invalid_field(
                "imageRef",
                &Value::String(image.clone()),
                &format!("{} is not a 'uuid'", python_repr(&image)),
            ))
        }
    };
    let spec_image = SpecImage {
        image_ref: image_ref.clone(),
        scheduling: ImageProps::from_image(&properties).map_err(bad)?,
        recorded: recorded_properties(&properties),
    };
    let change = RebuildChange {
        image_ref: image_ref.clone(),
        name: name.clone(),
        metadata: metadata.clone(),
    };
    let recorded = spec_image.recorded.clone();
    let mut s = start_action(app, ctx, id, &REBUILD, Some((change, spec_image))).await?;
    s.image_ref = image_ref;
    s.image_properties = recorded;
    if let Some(n) = name {
        s.name = n;
    }
    if let Some(m) = metadata {
        s.metadata = m;
    }
    s.task_state = Some(ts::REBUILDING.to_owned());
    s.updated_at = Some(chrono::Utc::now());
    let mut view = detail_view(app, ctx, &s);
    add_server_groups(app, ctx, &s.uuid, &mut view).await?;
    view["adminPass"] = json!(o
        .get("adminPass")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(admin_pass));
    Ok((StatusCode::ACCEPTED, Json(json!({ "server": view }))).into_response())
}

fn admin_pass() -> String {
    use rand::Rng;
    let mut r = rand::thread_rng();
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    (0..12)
        .map(|_| ALPHABET[r.gen_range(0..ALPHABET.len())] as char)
        .collect()
}

/// `lock` (`locked_reason` from 2.73). Locking a locked server is a no-op
/// for its owner, as upstream.
async fn lock(app: &App, ctx: &Ctx, id: &str, arg: &Value) -> ApiResult<Response> {
    let reason = match arg {
        Value::Null => None,
        Value::Object(m) if ctx.mv.at_least(73) => {
            match m.get("locked_reason") {
                None => {}
                Some(Value::String(s)) if s.chars().count() <= 255 => {}
                Some(v @ Value::String(_)) => {
                    return Err(invalid_field("locked_reason", v, &too_long(v)))
                }
                Some(other) => {
                    return Err(invalid_field(
                        "locked_reason",
                        other,
                        &not_of_type(other, "'string'"),
                    ))
                }
            }
            if let Some(k) = m.keys().find(|k| k.as_str() != "locked_reason") {
                return Err(invalid_field(
                    "lock",
                    arg,
                    &format!(
                        "Additional properties are not allowed ({} was unexpected)",
                        python_repr(k)
                    ),
                ));
            }
            m.get("locked_reason")
                .and_then(Value::as_str)
                .map(str::to_owned)
        }
        Value::Object(m) if m.is_empty() => None,
        // 2.73: Nova's `['object', 'null']`. Before, Nova takes any value
        // (`{}`); this region only null or `{}`.
        other if ctx.mv.at_least(73) => {
            return Err(invalid_field(
                "lock",
                other,
                &not_of_type(other, "'object', 'null'"),
            ))
        }
        other => return Err(invalid_field("lock", other, &not_of_type(other, "'null'"))),
    };
    let (cell, s) = in_cell(app, ctx, id, "os_compute_api:os-lock-server:lock", "lock").await?;
    let is_owner = s.project_id == ctx.project_id();
    if s.locked && is_owner {
        return Ok(StatusCode::ACCEPTED.into_response());
    }
    let by = if is_owner { "owner" } else { "admin" };
    let global = format!("req-{}", uuid::Uuid::new_v4());
    let db = app.cells.db(&cell).await?;
    if !db
        .api_set_lock(
            id,
            Some((by, reason.as_deref())),
            &record(ctx, action::LOCK, &global),
        )
        .await?
    {
        return Err(ApiError::server_not_found(id));
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

/// `unlock`: a server locked by an admin needs
/// `os-lock-server:unlock:unlock_override` to be unlocked by its owner.
async fn unlock(app: &App, ctx: &Ctx, id: &str) -> ApiResult<Response> {
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
    let global = format!("req-{}", uuid::Uuid::new_v4());
    let db = app.cells.db(&cell).await?;
    if !db
        .api_set_lock(id, None, &record(ctx, action::UNLOCK, &global))
        .await?
    {
        return Err(ApiError::server_not_found(id));
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

/// Turns validated metadata into a JSON object.
pub(crate) fn metadata_object(items: &[(String, String)]) -> Value {
    Value::Object(
        items
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect::<Map<_, _>>(),
    )
}
