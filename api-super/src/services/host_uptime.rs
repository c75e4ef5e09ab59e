//! A compute host's uptime, asked of its compute over its cell's bus
//! (`get_host_uptime`), for `os-hypervisors` (`/{id}/uptime` below 2.88,
//! the `uptime` field of the detail view from 2.88).

use std::time::Duration;

use cell_mapping::CellMapping;
use fabric::rpc::{self, code, method, RequestIds};

use crate::compute_api::error::ApiError;
use crate::compute_api::{App, Ctx};

/// How long a compute may take to answer.
pub const UPTIME_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a host's uptime is not known.
#[derive(Debug)]
pub enum NoUptime {
    /// The driver reports none (Nova: `NotImplementedError`).
    NotReported,
    /// The call failed (no answer in time, the bus down, a driver error).
    Failed(ApiError),
}

/// What `uptime` prints on `host` (in `cell`), as its driver reports it.
pub async fn uptime(
    app: &App,
    ctx: &Ctx,
    cell: &CellMapping,
    host: &str,
) -> Result<String, NoUptime> {
    let bus = app
        .cells
        .bus(cell)
        .await
        .map_err(|e| NoUptime::Failed(e.into()))?;
    let ids = RequestIds {
        request_id: ctx.request_id.clone(),
        global_request_id: ctx.request_id.clone(),
    };
    let res: Result<rpc::HostUptime, _> = rpc::call(
        bus.as_ref(),
        &rpc::compute_queue(host),
        method::GET_HOST_UPTIME,
        &rpc::HostUptimeRequest {},
        &ids,
        UPTIME_CALL_TIMEOUT,
    )
    .await;
    match res {
        Ok(r) => Ok(r.uptime),
        Err(e) if e.remote_code() == Some(code::NOT_IMPLEMENTED) => Err(NoUptime::NotReported),
        Err(e) => {
            tracing::warn!(host, error = %e, "get_host_uptime failed");
            Err(NoUptime::Failed(ApiError::internal(format!(
                "get_host_uptime on {host}: {e}"
            ))))
        }
    }
}

/// The uptime of each of `hosts` (cell, host) that is up, at most
/// `PARALLEL` calls at a time; a host whose uptime is not known is left out.
pub async fn uptimes(
    app: &App,
    ctx: &Ctx,
    hosts: Vec<(CellMapping, String)>,
) -> std::collections::HashMap<String, String> {
    use futures_util::stream::{self, StreamExt};
    const PARALLEL: usize = 16;
    stream::iter(hosts)
        .map(|(cell, host)| async move {
            let r = uptime(app, ctx, &cell, &host).await;
            (host, r)
        })
        .buffer_unordered(PARALLEL)
        .filter_map(|(host, r)| async move { r.ok().map(|u| (host, u)) })
        .collect()
        .await
}
