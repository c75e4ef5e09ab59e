//! Update: the edit of `PUT /servers/{id}` once its body is parsed. A
//! build not landed yet has its build request edited (the landing carries
//! the edits over); a landed server is edited in its cell.

use cell_mapping::db::InstanceEdit;
use chrono::Utc;

use crate::compute_api::error::{ApiError, ApiResult};
use crate::compute_api::servers::lookup::{find, Found};
use crate::compute_api::servers::model::Server;
use crate::compute_api::servers::views::current_zones;
use crate::compute_api::{App, Ctx};

/// Applies `edit` (the fields given; a `description` of `Some(None)`
/// clears it) to the server `id` (checking `os_compute_api:servers:update`
/// on it) and returns it as edited.
pub async fn update(app: &App, ctx: &Ctx, id: &str, edit: InstanceEdit) -> ApiResult<Server> {
    // Two tries: the build may land between the find and the edit (the
    // edit then finds no build request, and the next find the instance).
    for _ in 0..2 {
        match find(app, ctx, id, "os_compute_api:servers:update").await? {
            Found::Build(_) => {
                let Some(b) = app.db.edit_build(id, &edit).await? else {
                    continue;
                };
                return Ok(Server::from_build(&b.instance));
            }
            Found::Cell(cell, mut s) => {
                current_zones(app, ctx, std::slice::from_mut(&mut s)).await?;
                if !edit.is_empty() {
                    let db = app.cells.db(&cell).await?;
                    if !db.api_update(id, &edit).await? {
                        return Err(ApiError::server_not_found(id));
                    }
                    let InstanceEdit {
                        name,
                        description,
                        hostname,
                        access_ip_v4,
                        access_ip_v6,
                    } = edit;
                    s.name = name.unwrap_or(s.name);
                    s.description = description.unwrap_or(s.description);
                    s.hostname = hostname.or(s.hostname);
                    s.access_ip_v4 = access_ip_v4.or(s.access_ip_v4);
                    s.access_ip_v6 = access_ip_v6.or(s.access_ip_v6);
                    s.updated_at = Some(Utc::now());
                }
                return Ok(s);
            }
        }
    }
    Err(ApiError::server_not_found(id))
}
