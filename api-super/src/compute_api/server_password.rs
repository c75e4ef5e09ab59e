//! `GET` / `DELETE /servers/{id}/os-server-password`, as Nova's
//! `server_password` API: the encrypted password a guest posted to the
//! metadata service, kept in the instance's system metadata
//! (`password_0` … `password_3`). This region has no metadata service
//! yet, so nothing sets it: `GET` answers `{"password": ""}` until
//! something does, and `DELETE` (204) clears it. Neither touches the
//! guest.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::json;

use super::error::{ApiError, ApiResult};
use super::servers::lookup::{find, Found};
use super::{App, Ctx};

/// `GET /servers/{id}/os-server-password` (`os-server-password:show`).
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let password = match find(&app, &ctx, &id, "os_compute_api:os-server-password:show").await? {
        // Not scheduled yet: nothing can have posted one.
        Found::Build(_) => String::new(),
        Found::Cell(cell, _) => {
            let db = app.cells.db(&cell).await?;
            db.api_server_password(&id)
                .await?
                .ok_or_else(|| ApiError::server_not_found(&id))?
        }
    };
    Ok(Json(json!({ "password": password })).into_response())
}

/// `DELETE /servers/{id}/os-server-password` (`os-server-password:clear`):
/// 204.
pub async fn clear(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    if let Found::Cell(cell, _) =
        find(&app, &ctx, &id, "os_compute_api:os-server-password:clear").await?
    {
        let db = app.cells.db(&cell).await?;
        if !db.api_clear_server_password(&id).await? {
            return Err(ApiError::server_not_found(&id));
        }
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
