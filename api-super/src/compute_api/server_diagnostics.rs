//! `GET /servers/{id}/diagnostics` (admin, `os-server-diagnostics`), as
//! Nova's `server_diagnostics` API: the driver's dict before 2.48, Nova's
//! standard form from 2.48; the call itself is
//! [`crate::services::diagnostics`].

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};

use super::error::ApiResult;
use super::{App, Ctx};
use crate::services::diagnostics::diagnostics;

/// `GET /servers/{id}/diagnostics`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let v = diagnostics(&app, &ctx, &id, ctx.mv.at_least(48)).await?;
    Ok(Json(v).into_response())
}
