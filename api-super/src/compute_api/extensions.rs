//! `GET /extensions` and `/extensions/{alias}`: the v2.1 API's frozen
//! extension list, which old clients read to learn what a cloud offers.
//! Nova answers one fixed list whatever its deployment; this region lists
//! only the extensions it serves, under Nova's aliases and names (the
//! descriptions are ours), so a client that looks for an alias finds it
//! exactly when the calls behind it work here.

use axum::extract::{Path, RawQuery, State};
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::query_schema;
use super::{App, Ctx};

/// (alias, name, description) of each extension this region serves.
const SERVED: &[(&str, &str, &str)] = &[
    (
        "OS-DCF",
        "DiskConfig",
        "A server's disk configuration (AUTO or MANUAL).",
    ),
    (
        "OS-EXT-AZ",
        "ExtendedAvailabilityZone",
        "The availability zone in the server's view.",
    ),
    (
        "OS-EXT-SRV-ATTR",
        "ExtendedServerAttributes",
        "The host, node and instance name in the server's view (admin).",
    ),
    (
        "OS-EXT-STS",
        "ExtendedStatus",
        "The vm, task and power states in the server's view.",
    ),
    (
        "OS-FLV-DISABLED",
        "FlavorDisabled",
        "Whether a flavor is disabled.",
    ),
    (
        "OS-FLV-EXT-DATA",
        "FlavorExtraData",
        "A flavor's ephemeral disk size.",
    ),
    (
        "OS-SRV-USG",
        "ServerUsage",
        "When a server was launched and terminated.",
    ),
    (
        "os-access-ips",
        "AccessIPs",
        "A server's access IPv4 and IPv6 addresses.",
    ),
    ("os-aggregates", "Aggregates", "Host aggregates (admin)."),
    (
        "os-availability-zone",
        "AvailabilityZone",
        "Availability zones and their hosts.",
    ),
    (
        "os-config-drive",
        "ConfigDrive",
        "Servers with a config drive.",
    ),
    (
        "os-console-auth-tokens",
        "ConsoleAuthTokens",
        "What a console token connects to (admin).",
    ),
    (
        "os-console-output",
        "ConsoleOutput",
        "The tail of a server's console log.",
    ),
    (
        "os-flavor-access",
        "FlavorAccess",
        "Which projects may use a private flavor.",
    ),
    (
        "os-flavor-extra-specs",
        "FlavorExtraSpecs",
        "A flavor's extra specs.",
    ),
    (
        "os-flavor-manage",
        "FlavorManage",
        "Flavor creation and deletion (admin).",
    ),
    (
        "os-hosts",
        "Hosts",
        "Compute hosts and their resources (admin; deprecated).",
    ),
    (
        "os-hypervisors",
        "Hypervisors",
        "Compute nodes of every cell (admin).",
    ),
    (
        "os-instance-actions",
        "InstanceActions",
        "What was done to a server, and its events.",
    ),
    ("os-keypairs", "Keypairs", "SSH and x509 key pairs."),
    (
        "os-lock-server",
        "LockServer",
        "Locking a server against changes.",
    ),
    (
        "os-multiple-create",
        "MultipleCreate",
        "Creating several servers in one request.",
    ),
    (
        "os-pause-server",
        "PauseServer",
        "Pausing and unpausing a server.",
    ),
    ("os-quota-sets", "Quotas", "Project quotas."),
    (
        "os-remote-consoles",
        "RemoteConsoles",
        "Serial and noVNC consoles of a server.",
    ),
    (
        "os-server-groups",
        "ServerGroups",
        "Server groups and their policies.",
    ),
    (
        "os-server-start-stop",
        "ServerStartStop",
        "Starting and stopping a server.",
    ),
    (
        "os-services",
        "Services",
        "Services of every cell and their switches (admin).",
    ),
    (
        "os-simple-tenant-usage",
        "SimpleTenantUsage",
        "A project's usage over a period.",
    ),
    (
        "os-suspend-server",
        "SuspendServer",
        "Suspending and resuming a server.",
    ),
    (
        "os-used-limits",
        "UsedLimits",
        "What a project uses of its limits.",
    ),
    (
        "os-user-data",
        "UserData",
        "User data for a server's guest.",
    ),
    ("server-metadata", "ServerMetadata", "A server's metadata."),
    (
        "os-admin-actions",
        "AdminActions",
        "Resetting a server's state (admin).",
    ),
    (
        "os-instance-usage-audit-log",
        "OSInstanceUsageAuditLog",
        "The instance usage audit log (admin).",
    ),
    (
        "os-quota-class-sets",
        "QuotaClasses",
        "Quota classes: the default quotas (admin).",
    ),
    (
        "os-server-diagnostics",
        "ServerDiagnostics",
        "A server's diagnostics from its hypervisor (admin).",
    ),
    (
        "os-server-external-events",
        "ServerExternalEvents",
        "Events other services send about servers (admin, service).",
    ),
    (
        "os-server-password",
        "ServerPassword",
        "A server's encrypted admin password.",
    ),
];

fn view((alias, name, description): &(&str, &str, &str)) -> Value {
    json!({
        "alias": alias,
        "description": description,
        "links": [],
        "name": name,
        "namespace": "http://docs.openstack.org/compute/ext/fake_xml",
        "updated": "2014-12-03T00:00:00Z",
    })
}

/// `GET /extensions`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:extensions", ctx.project_id())?;
    let list: Vec<Value> = SERVED.iter().map(view).collect();
    Ok(Json(json!({ "extensions": list })))
}

/// `GET /extensions/{alias}`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(alias): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:extensions", ctx.project_id())?;
    SERVED
        .iter()
        .find(|e| e.0 == alias)
        .map(|e| Json(json!({ "extension": view(e) })))
        .ok_or_else(|| ApiError::NotFound("The resource could not be found.".into()))
}
