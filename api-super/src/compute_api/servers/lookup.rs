//! Finding a server across cells: its mapping, then its cell's instance
//! or its build request, with the caller's policy checked on it.

use cell_mapping::CellMapping;
use fabric::rpc::vm_state as vs;

use super::model::Server;
use super::views::IMAGE_PROPERTIES_MV;
use crate::cells::{CellDown, CellError};
use crate::compute_api::db::MappingRow;
use crate::compute_api::error::{ApiError, ApiResult};
use crate::compute_api::{App, Ctx};

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
pub(crate) async fn find_with(
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
pub(crate) async fn locate_with(
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
        let (cell_id, project, user, mut row) = match app.db.landed(id).filter(|_| attempt == 0) {
            Some((cell, project, user)) => (Some(cell), project, user, None),
            None => {
                let Some(m) = app.db.mapping_row(id).await? else {
                    return Err(ApiError::server_not_found(id));
                };
                (m.cell_id, m.project_id.clone(), m.user_id.clone(), Some(m))
            }
        };
        check_owner(app, ctx, action, (&project, user.as_deref()), id)?;
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
                        s.trusted_certs = shown.trusted_certs;
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

/// Policy on a server of `(project, user)` (its owners are the target of
/// `project_id` and `user_id` rules, as in Nova; a user not known is
/// unknown to the policy, which then denies a `user_id` rule): a non-admin
/// denied on another project's server gets 404 (its existence is not
/// disclosed), else 403.
pub(crate) fn check_owner(
    app: &App,
    ctx: &Ctx,
    action: &str,
    (project, user): (&str, Option<&str>),
    id: &str,
) -> ApiResult<()> {
    match app.authorize_owned(ctx, action, project, user) {
        Ok(()) => Ok(()),
        Err(_) if !ctx.is_admin() && project != ctx.project_id() => {
            Err(ApiError::server_not_found(id))
        }
        Err(e) => Err(e),
    }
}
