//! The integer ids the Compute API answers below microversion 2.53 for
//! compute nodes (`os-hypervisors`) and services (`os-services`). A cell's
//! own row ids repeat from cell to cell, so these come from the API
//! database instead (`cell_mapping::db::legacy_ids`): one region-wide id
//! per UUID, handed out the first time it is shown and never reused.

use std::collections::HashMap;

use cell_mapping::db::LegacyKind;

use super::error::ApiResult;
use super::{App, Ctx};

/// The region-wide ids of `uuids` when the caller's microversion answers
/// integer ids (below 2.53); empty from 2.53, where the UUID is the id.
pub async fn for_uuids<'a>(
    app: &App,
    ctx: &Ctx,
    kind: LegacyKind,
    uuids: impl Iterator<Item = &'a str>,
) -> ApiResult<HashMap<String, i64>> {
    if ctx.mv.at_least(53) {
        return Ok(HashMap::new());
    }
    // In the order shown, so that new ids follow the listing's order.
    let mut seen = std::collections::HashSet::new();
    let list: Vec<String> = uuids
        .filter(|u| seen.insert(*u))
        .map(str::to_owned)
        .collect();
    Ok(app.db.api().legacy_ids(kind, &list).await?)
}

/// The UUID a region-wide integer id names (None: no such id).
pub async fn uuid_of(app: &App, kind: LegacyKind, id: i64) -> ApiResult<Option<String>> {
    Ok(app.db.api().legacy_uuid(kind, id).await?)
}
