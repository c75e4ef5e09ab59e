//! A server's diagnostics (`GET /servers/{id}/diagnostics`), asked of the
//! compute that runs it over the cell's bus, as Nova's compute API: the
//! instance needs a host (else 409 "Instance … is not ready"), its guest
//! must be running (else 409 naming the power state the compute read), and
//! a driver without diagnostics is a 501. From 2.48 the answer is Nova's
//! standard form (every field present, null where the driver cannot say);
//! before, the driver's own dict.

use std::time::Duration;

use fabric::bus::BusError;
use fabric::rpc::{self, code, method, RequestIds, RpcError};
use serde_json::{json, Map, Value};

use crate::compute_api::error::{ApiError, ApiResult};
use crate::compute_api::servers::lookup::{find, Found};
use crate::compute_api::servers::model::Server;
use crate::compute_api::{App, Ctx};

/// How long the compute may take to answer.
pub const DIAGNOSTICS_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The policy rule.
pub const RULE: &str = "os_compute_api:os-server-diagnostics";

/// The diagnostics of the server `id`: Nova's standard form (2.48) when
/// `standard`, else the driver's dict.
pub async fn diagnostics(app: &App, ctx: &Ctx, id: &str, standard: bool) -> ApiResult<Value> {
    let not_ready = || ApiError::Conflict(format!("Instance {id} is not ready"));
    let (cell, s) = match find(app, ctx, id, RULE).await? {
        Found::Build(_) => return Err(not_ready()),
        Found::Cell(cell, s) => (cell, s),
    };
    let host = s.host.clone().ok_or_else(not_ready)?;
    let bus = app.cells.bus(&cell).await?;
    let (call, name) = if standard {
        (method::GET_INSTANCE_DIAGNOSTICS, "get_instance_diagnostics")
    } else {
        (method::GET_DIAGNOSTICS, "get_diagnostics")
    };
    let ids = RequestIds {
        request_id: ctx.request_id.clone(),
        global_request_id: ctx.request_id.clone(),
    };
    let req = rpc::DiagnosticsRequest {
        instance_uuid: id.to_owned(),
    };
    let res: Result<rpc::DiagnosticsReply, RpcError> = rpc::call(
        bus.as_ref(),
        &rpc::compute_queue(&host),
        call,
        &req,
        &ids,
        DIAGNOSTICS_CALL_TIMEOUT,
    )
    .await;
    let reply = res.map_err(|e| match &e {
        // Nova's API names its own method in the 409 for both forms.
        RpcError::Bus(BusError::Remote { code: c, message }) if c == code::INVALID_TRANSITION => {
            ApiError::Conflict(format!(
                "Cannot 'get_diagnostics' instance {id} while it is in power state {message}"
            ))
        }
        RpcError::Bus(BusError::Remote { code: c, .. }) if c == code::NOT_IMPLEMENTED => {
            ApiError::NotImplemented("The requested functionality is not supported.".into())
        }
        RpcError::Bus(BusError::Remote { code: c, .. }) if c == code::NOT_FOUND => {
            ApiError::server_not_found(id)
        }
        _ => {
            if let RpcError::Bus(BusError::Timeout(_)) = &e {
                tracing::warn!(instance = %id, host = %host, "the compute did not answer {name} in time");
            }
            ApiError::internal(format!("{name} on {host}: {e}"))
        }
    })?;
    let v: Value = serde_json::from_str(&reply.json)
        .map_err(|e| ApiError::internal(format!("{host} answered {name} with {e}")))?;
    Ok(if standard { standard_view(&v, &s) } else { v })
}

/// Nova's fields of each list entry of the standard form.
const CPU: &[&str] = &["id", "time", "utilisation"];
const DISK: &[&str] = &[
    "read_bytes",
    "read_requests",
    "write_bytes",
    "write_requests",
    "errors_count",
];
const NIC: &[&str] = &[
    "mac_address",
    "rx_octets",
    "rx_errors",
    "rx_drop",
    "rx_packets",
    "rx_rate",
    "tx_octets",
    "tx_errors",
    "tx_drop",
    "tx_packets",
    "tx_rate",
];

/// Nova's `ViewBuilder.instance_diagnostics`: every field, null where
/// unknown. The uptime (since launch) and the config drive are the
/// instance's when the driver leaves them out.
fn standard_view(v: &Value, s: &Server) -> Value {
    let pick = |o: &Value, keys: &[&str]| -> Value {
        Value::Object(
            keys.iter()
                .map(|k| ((*k).to_owned(), o.get(*k).cloned().unwrap_or(Value::Null)))
                .collect::<Map<_, _>>(),
        )
    };
    let list = |k: &str, keys: &[&str]| -> Value {
        Value::Array(
            v.get(k)
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|o| pick(o, keys)).collect())
                .unwrap_or_default(),
        )
    };
    let mut out = pick(
        v,
        &[
            "state",
            "driver",
            "hypervisor",
            "hypervisor_os",
            "uptime",
            "config_drive",
            "num_cpus",
            "num_nics",
            "num_disks",
        ],
    );
    if out["uptime"].is_null() {
        if let Some(at) = s.launched_at {
            out["uptime"] = json!((chrono::Utc::now() - at).num_seconds().max(0));
        }
    }
    if out["config_drive"].is_null() {
        out["config_drive"] = json!(s.config_drive.eq_ignore_ascii_case("true"));
    }
    out["cpu_details"] = list("cpu_details", CPU);
    out["disk_details"] = list("disk_details", DISK);
    out["nic_details"] = list("nic_details", NIC);
    out["memory_details"] = pick(
        v.get("memory_details").unwrap_or(&Value::Null),
        &["maximum", "used"],
    );
    out
}
