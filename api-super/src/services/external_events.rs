//! The delivery of `POST /os-server-external-events`, as Nova's: each
//! event's instance is looked up (its mapping, then its row in its cell:
//! one read per instance), an event for no live instance is 404, a
//! volume event without its tag 400, one for an instance without a host
//! 422, and the others (200) are cast to their instances' computes, one
//! `external_instance_event` cast per host.

use std::collections::{BTreeMap, HashMap};

use cell_mapping::CellMapping;
use fabric::rpc::{self, method, RequestIds};

use crate::compute_api::error::{ApiError, ApiResult};
use crate::compute_api::{App, Ctx};

/// One event as the request gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The instance.
    pub server_uuid: String,
    /// Its name.
    pub name: String,
    /// Its status (`completed` when not given).
    pub status: Option<String>,
    /// Its tag.
    pub tag: Option<String>,
}

/// Nova's `_is_event_tag_present_when_required`: the volume events name
/// their volume in the tag.
fn tag_missing(e: &Event) -> bool {
    matches!(e.name.as_str(), "volume-extended" | "volume-reimaged") && e.tag.is_none()
}

/// Where a live instance is: its cell and its host (none yet).
type Place = Option<(CellMapping, Option<String>)>;

async fn locate(app: &App, uuid: &str) -> ApiResult<Place> {
    let Some(m) = app.db.mapping_row(uuid).await? else {
        return Ok(None);
    };
    // A build not in a cell yet: Nova finds no instance for it either.
    let Some(cell) = m.cell_id.and_then(|c| app.cells.by_id(c)) else {
        return Ok(None);
    };
    let id = uuid.to_owned();
    let row = app
        .cells
        .read(&cell, |db| async move { db.api_instance(&id).await })
        .await?;
    Ok(row.filter(|i| !i.deleted).map(|i| (cell, i.host)))
}

/// Looks each event's instance up and casts the accepted events to their
/// hosts; each event's code, in the request's order. A cast that fails is
/// a 503 once every host was tried (events are notices: those delivered
/// to other hosts may come again when the request is repeated).
pub async fn deliver(app: &App, ctx: &Ctx, events: &[Event]) -> ApiResult<Vec<u16>> {
    let mut places: HashMap<&str, Place> = HashMap::new();
    for e in events {
        if !places.contains_key(e.server_uuid.as_str()) {
            let p = locate(app, &e.server_uuid).await?;
            places.insert(&e.server_uuid, p);
        }
    }
    let mut codes = Vec::with_capacity(events.len());
    let mut by_host: BTreeMap<(i64, String), (CellMapping, Vec<rpc::ExternalEvent>)> =
        BTreeMap::new();
    for e in events {
        let code = match places.get(e.server_uuid.as_str()) {
            None | Some(None) => 404,
            Some(Some(_)) if tag_missing(e) => 400,
            Some(Some((cell, Some(host)))) => {
                by_host
                    .entry((cell.id, host.clone()))
                    .or_insert_with(|| (cell.clone(), Vec::new()))
                    .1
                    .push(rpc::ExternalEvent {
                        instance_uuid: e.server_uuid.clone(),
                        name: e.name.clone(),
                        status: e.status.clone().unwrap_or_else(|| "completed".into()),
                        tag: e.tag.clone().unwrap_or_default(),
                    });
                200
            }
            Some(Some((_, None))) => 422,
        };
        codes.push(code);
    }
    let ids = RequestIds {
        request_id: ctx.request_id.clone(),
        global_request_id: ctx.request_id.clone(),
    };
    let mut failed = false;
    for ((_, host), (cell, events)) in by_host {
        let n = events.len();
        let sent = match app.cells.bus(&cell).await {
            Ok(bus) => rpc::cast(
                bus.as_ref(),
                &rpc::compute_queue(&host),
                method::EXTERNAL_INSTANCE_EVENT,
                &rpc::ExternalEvents { events },
                &ids,
                rpc::ACTION_CAST_TTL,
            )
            .await
            .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match sent {
            Ok(()) => tracing::info!(%host, events = n, "external events cast"),
            Err(e) => {
                tracing::error!(%host, events = n, error = %e, "could not send external events");
                failed = true;
            }
        }
    }
    if failed {
        return Err(ApiError::Unavailable(
            "The events could not be sent to every compute host; try again later.".into(),
        ));
    }
    Ok(codes)
}
