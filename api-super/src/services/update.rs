//! Update: the edit of `PUT /servers/{id}` once its body is parsed. A
//! build not landed yet has its build request edited (the landing carries
//! the edits over); a landed server is edited in its cell.

use chrono::Utc;

use crate::compute_api::error::{ApiError, ApiResult};
use crate::compute_api::servers::lookup::{find, Found};
use crate::compute_api::servers::model::Server;
use crate::compute_api::servers::views::current_zones;
use crate::compute_api::{App, Ctx};

/// The fields an update sets (`None`: left as they are; a `description`
/// of `Some(None)` clears it).
pub struct Edit {
    pub name: Option<String>,
    pub description: Option<Option<String>>,
    pub hostname: Option<String>,
}

/// Applies `edit` to the server `id` (checking
/// `os_compute_api:servers:update` on it) and returns it as edited.
pub async fn update(app: &App, ctx: &Ctx, id: &str, edit: Edit) -> ApiResult<Server> {
    let Edit {
        name,
        description,
        hostname,
    } = edit;
    // Two tries: the build may land between the find and the edit (the
    // edit then finds no build request, and the next find the instance).
    for _ in 0..2 {
        match find(app, ctx, id, "os_compute_api:servers:update").await? {
            Found::Build(_) => {
                let Some(b) = app
                    .db
                    .edit_build(
                        id,
                        name.as_deref(),
                        description.as_ref().map(Option::as_deref),
                        hostname.as_deref(),
                    )
                    .await?
                else {
                    continue;
                };
                return Ok(Server::from_build(&b.instance));
            }
            Found::Cell(cell, mut s) => {
                current_zones(app, ctx, std::slice::from_mut(&mut s)).await?;
                if name.is_some() || description.is_some() || hostname.is_some() {
                    let db = app.cells.db(&cell).await?;
                    let changed = db
                        .api_update(
                            id,
                            name.as_deref(),
                            description.as_ref().map(Option::as_deref),
                            hostname.as_deref(),
                        )
                        .await?;
                    if !changed {
                        return Err(ApiError::server_not_found(id));
                    }
                    if let Some(n) = name {
                        s.name = n;
                    }
                    if let Some(d) = description {
                        s.description = d;
                    }
                    if let Some(h) = hostname {
                        s.hostname = Some(h);
                    }
                    s.updated_at = Some(Utc::now());
                }
                return Ok(s);
            }
        }
    }
    Err(ApiError::server_not_found(id))
}
