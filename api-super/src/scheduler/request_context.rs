//! What a [`Request`] needs beyond the request spec, read when the
//! instances are scheduled: the flavor's extra specs (API database) and
//! the server group the instances joined at create time, with the hosts
//! of its other live members (their instance mappings and cells).

use std::collections::BTreeMap;

use super::source::HostSource;
use super::{GroupSpec, Request};
use crate::cells::Cells;

/// Fills `req.flavor_extra_specs` (those of the request spec, else read
/// for `flavorid`) and `req.group` from the group of `instances[0]` (every
/// instance of a request joins the same group); `in_group == Some(false)`
/// (the request named no group) skips the group look-up.
pub async fn fill(
    source: &dyn HostSource,
    cells: &Cells,
    (flavorid, specs): (&str, Option<&BTreeMap<String, String>>),
    instances: &[String],
    in_group: Option<bool>,
    req: &mut Request,
) -> Result<(), String> {
    req.flavor_extra_specs = match specs {
        Some(s) => s.clone(),
        None => source
            .flavor_extra_specs(flavorid)
            .await
            .map_err(|e| e.to_string())?,
    };
    let Some(first) = instances.first() else {
        return Ok(());
    };
    if in_group == Some(false) {
        return Ok(());
    }
    let Some(group) = source
        .instance_server_group(first)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(());
    };
    let max_server_per_host = group
        .rules
        .as_deref()
        .and_then(|r| serde_json::from_str::<serde_json::Value>(r).ok())
        .and_then(|v| v.get("max_server_per_host").and_then(|m| m.as_i64()))
        .unwrap_or(1);
    let mut hosts = Vec::new();
    for m in group.members.iter().filter(|m| !instances.contains(m)) {
        let Some(cell_id) = source.instance_cell(m).await.map_err(|e| e.to_string())? else {
            continue;
        };
        let Some(cell) = cells.by_id(cell_id) else {
            continue;
        };
        let cdb = cells.db(&cell).await.map_err(|e| e.to_string())?;
        if let Some(i) = cdb.api_instance(m).await.map_err(|e| e.to_string())? {
            if let (false, Some(h)) = (i.deleted, i.host) {
                hosts.push(h);
            }
        }
    }
    req.group = Some(GroupSpec {
        uuid: group.uuid,
        policy: group.policy,
        max_server_per_host,
        hosts,
    });
    Ok(())
}
