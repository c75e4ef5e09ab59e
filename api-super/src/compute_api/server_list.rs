//! `GET /servers` and `/servers/detail` over every cell: filters, sort keys
//! and keyset paging, as one sorted merge of per-cell sorted pages.
//!
//! Each cell is read lazily: a first page of about its share of `limit`
//! (all cells in parallel), then another page only for a cell whose rows
//! ran out while the merge still needs rows. A 1,000-server page over four
//! cells reads about 1,150 instance rows, where reading `limit` rows from
//! every cell (upstream's way) reads 4,000. Metadata, tags and faults are
//! read afterwards for the rows kept only. Paging is by the sort values of
//! the marker (the last server of the previous page) with the uuid as the
//! final key, so a page never skips or repeats a server while others come
//! and go.

use std::collections::{HashMap, HashSet, VecDeque};

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use cell_mapping::db::{CellInstance, ListFilter, ListOrder, SortKey, SortValue};
use cell_mapping::CellMapping;
use chrono::{DateTime, Utc};
use fabric::rpc::{power_state, task_state as ts, vm_state as vs};
use serde_json::json;

use super::db::{BuildInstance, MappingRow};
use super::error::{ApiError, ApiResult};
use super::query_schema;
use super::server_filters::{self, Matchers, PAGING_SORTING_PARAMS};
use super::servers::model::{CellDetails, Server};
use super::servers::views::{
    brief_view, current_zones, DetailView, PartialKind, PartialServer, PartialView,
    IMAGE_PROPERTIES_MV, PARTIAL_RECORDS_MV,
};
use super::servers::{decode, parse_query};
use super::{App, Ctx};
use crate::cells::{CellDown, CellError, Cells};

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// Rows read from a cell at most per statement.
const MAX_PAGE: i64 = 500;

/// Nova's sort keys that were valid before its query schema and are
/// ignored (dropped with their direction) before 2.75, refused from 2.75.
const IGNORED_SORT_KEYS: &[&str] = &[
    "architecture",
    "cell_name",
    "cleaned",
    "default_ephemeral_device",
    "default_swap_device",
    "deleted",
    "deleted_at",
    "disable_terminate",
    "ephemeral_gb",
    "ephemeral_key_uuid",
    "id",
    "key_data",
    "launched_on",
    "memory_mb",
    "os_type",
    "reservation_id",
    "root_gb",
    "shutdown_terminate",
    "user_data",
    "vcpus",
    "vm_mode",
];

/// Nova's valid sort keys whose values this cloud keeps elsewhere or not
/// at all while the servers differ in them (`key_name` is in the API
/// database, the flavor's internal id is not kept): refused with a clear
/// 400 instead of a silently meaningless order.
const UNSUPPORTED_SORT_KEYS: &[&str] = &["instance_type_id", "key_name"];

/// The sort a request asks for (`sort_key`/`sort_dir`, repeatable), as
/// upstream: directions pair with keys by position, keys without one take
/// the first direction given (default `desc`), `created_at` and then
/// `uuid` close the order.
fn parse_order(ctx: &Ctx, raw: Option<&str>) -> ApiResult<ListOrder> {
    let mut keys: Vec<String> = Vec::new();
    let mut dirs: Vec<String> = Vec::new();
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match decode(k).as_str() {
            "sort_key" => keys.push(decode(v).trim().to_owned()),
            "sort_dir" => dirs.push(decode(v).trim().to_owned()),
            _ => {}
        }
    }
    // As upstream's `get_sort_params`: no key at all sorts by `created_at`
    // (in the first direction given, else newest first).
    if keys.is_empty() {
        keys.push("created_at".into());
        if dirs.is_empty() {
            dirs.push("desc".into());
        }
    }
    let invalid = |reason: &str| bad(format!("Invalid input received: {reason}"));
    for d in &dirs {
        if d != "asc" && d != "desc" {
            return Err(invalid("Unknown sort direction, must be 'desc' or 'asc'"));
        }
    }
    // Keys Nova ignores go with their direction.
    let locked_valid = ctx.mv.at_least(73);
    let mut kept: Vec<(String, Option<String>)> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let ignored = IGNORED_SORT_KEYS.contains(&k.as_str()) || (k == "locked" && !locked_valid);
        if ignored {
            if ctx.mv.at_least(75) {
                return Err(bad(format!(
                    "Invalid input for query parameters sort_key. Value: {k}. '{k}' is not a valid sort key"
                )));
            }
            continue;
        }
        if UNSUPPORTED_SORT_KEYS.contains(&k.as_str()) {
            return Err(bad(format!(
                "Sort key {k} is not supported by this cloud: its value is not kept"
            )));
        }
        if SortKey::parse(k).is_none() {
            return Err(bad(format!(
                "Invalid input for query parameters sort_key. Value: {k}. '{k}' is not a valid sort key"
            )));
        }
        if (k == "host" || k == "node") && !ctx.is_admin() {
            return Err(ApiError::Forbidden(format!(
                "Only administrators can sort servers by {k}"
            )));
        }
        kept.push((k.clone(), dirs.get(i).cloned()));
    }
    if dirs.len() > keys.len() {
        return Err(invalid("Sort direction size exceeds sort key size"));
    }
    // Keys without a direction take the first one left (default desc).
    let default_desc = kept
        .iter()
        .find_map(|(_, d)| d.as_deref())
        .is_none_or(|d| d == "desc");
    let mut order: Vec<(SortKey, bool)> = Vec::new();
    for (k, d) in kept {
        let key = SortKey::parse(&k).expect("checked above");
        if order.iter().any(|(o, _)| *o == key) {
            continue;
        }
        order.push((key, d.map_or(default_desc, |d| d == "desc")));
    }
    for key in [SortKey::CreatedAt, SortKey::Uuid] {
        if !order.iter().any(|(o, _)| *o == key) {
            order.push((key, default_desc));
        }
    }
    Ok(ListOrder { keys: order })
}

/// A build request as the instance row it will become (for sorting and
/// filtering it with the cells' rows).
pub(crate) fn build_as_instance(b: &BuildInstance) -> CellInstance {
    CellInstance {
        uuid: b.uuid.clone(),
        project_id: b.project_id.clone(),
        user_id: b.user_id.clone(),
        display_name: Some(b.display_name.clone()),
        vm_state: Some(vs::BUILDING.into()),
        task_state: Some(ts::SCHEDULING.into()),
        power_state: Some(power_state::NOSTATE as i64),
        availability_zone: b.availability_zone.clone(),
        image_ref: Some(b.image_ref.clone()),
        reservation_id: Some(b.reservation_id.clone()),
        launch_index: Some(b.launch_index),
        created_at: b.created_at,
        progress: Some(0),
        user_data: b.user_data.clone(),
        hostname: b.hostname.clone(),
        display_description: b.description.clone(),
        config_drive: b.config_drive.then(|| "True".to_owned()),
        access_ip_v4: b.access_ip_v4.clone(),
        access_ip_v6: b.access_ip_v6.clone(),
        ..CellInstance::default()
    }
}

/// The rows of one source (a cell, or the unscheduled build requests),
/// read a page at a time, each with its sort values.
struct Source {
    /// The cell (`None`: build requests, all loaded at once).
    cell: Option<CellMapping>,
    rows: VecDeque<(Vec<SortValue>, Server)>,
    after: Option<Vec<SortValue>>,
    done: bool,
    /// Set when the cell did not answer: it gives no (more) rows.
    down: Option<CellDown>,
}

/// What every page read of one listing shares.
struct Query<'a> {
    filter: ListFilter,
    /// The regex filters, checked on the rows read.
    matchers: &'a Matchers,
    cells: &'a Cells,
    app: &'a App,
}

impl Source {
    /// Reads the next rows (at least one kept, unless the cell has no more
    /// or is down).
    async fn refill(&mut self, q: &Query<'_>, want: i64) -> ApiResult<()> {
        let Some(cell) = &self.cell else {
            self.done = true;
            return Ok(());
        };
        let mut want = want.clamp(1, MAX_PAGE);
        while self.rows.is_empty() && !self.done {
            let mut f = q.filter.clone();
            f.after = self.after.clone();
            f.limit = want;
            let read = q
                .cells
                .read(cell, |db| async move { db.api_instances(&f).await })
                .await;
            let rows = match read {
                Ok(rows) => rows,
                Err(CellError::Down(d)) => {
                    self.down = Some(d);
                    self.done = true;
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            };
            self.done = (rows.len() as i64) < want;
            // Key names are on the rows; those written before the cells
            // kept them have theirs in the API database's request specs:
            // read for this batch only when a `key_name` filter needs them.
            let key_names = match &q.matchers.key_name {
                Some(_) => {
                    let ids: Vec<String> = rows
                        .iter()
                        .filter(|r| r.key_name.is_none())
                        .map(|r| r.uuid.clone())
                        .collect();
                    q.app.db.spec_views(&ids, false).await?
                }
                None => HashMap::new(),
            };
            for r in rows {
                let v = q.filter.order.values(&r);
                self.after = Some(v.clone());
                let key_name = r
                    .key_name
                    .as_deref()
                    .or_else(|| key_names.get(&r.uuid).and_then(|v| v.key_name.as_deref()));
                if q.matchers.row_ok(&r) && q.matchers.key_ok(key_name) {
                    self.rows.push_back((v, Server::from_cell(r)));
                }
            }
            // Rows the regex filters drop: read further in larger steps,
            // so that a rare match costs few statements.
            if !q.matchers.is_empty() {
                want = (want * 4).min(MAX_PAGE);
            }
        }
        Ok(())
    }
}

/// Whether `v` (a row's sort values) lies strictly after `after`.
fn is_after(order: &ListOrder, v: &[SortValue], after: Option<&Vec<SortValue>>) -> bool {
    after.is_none_or(|a| order.cmp(v, a) == std::cmp::Ordering::Greater)
}

async fn list(app: &App, ctx: &Ctx, raw: Option<&str>, detail: bool) -> ApiResult<Response> {
    let action = if detail {
        "os_compute_api:servers:detail"
    } else {
        "os_compute_api:servers:index"
    };
    app.authorize(ctx, action, ctx.project_id())?;
    let q = parse_query(raw);
    let search = server_filters::parse(app, ctx, raw, &q)?;
    let project = if search.all_tenants {
        app.authorize(ctx, &format!("{action}:get_all_tenants"), ctx.project_id())?;
        q.get("project_id").or(q.get("tenant_id")).cloned()
    } else {
        Some(ctx.project_id().to_owned())
    };
    let limit = match q.get("limit") {
        None => app.max_limit,
        Some(l) => l
            .parse::<usize>()
            .map_err(|_| {
                bad(format!(
                    "Invalid input for query parameters limit. Value: {l}."
                ))
            })?
            .min(app.max_limit),
    };
    let order = parse_order(ctx, raw)?;
    if search.nothing {
        return Ok(render(app, ctx, Vec::new(), detail, limit, raw));
    }
    let after = match q.get("marker") {
        None => None,
        Some(m) => Some(marker_position(app, &order, m).await?),
    };
    let filter = ListFilter {
        project_id: project.clone(),
        order,
        after,
        limit: 0,
        ..search.filter
    };
    let query = Query {
        filter,
        matchers: &search.matchers,
        cells: &app.cells,
        app,
    };
    // The build requests are read before the cells, not beside them: a
    // build lands by writing its cell row and only then deleting its build
    // request, so one gone from the first read is in its cell by the time
    // the cells are read (the other way round, a build landing in between
    // would be in neither read).
    let mut sources = sources(app, &query).await?;
    let merged = merge(&query, &mut sources, limit).await?;
    let down: Vec<(CellMapping, CellDown)> = sources
        .iter()
        .filter_map(|s| Some((s.cell.clone()?, s.down.clone()?)))
        .collect();
    let partials = if down.is_empty() {
        Vec::new()
    } else if partial_records(app, ctx, raw) {
        let ids: Vec<i64> = down.iter().map(|(c, _)| c.id).collect();
        let rows = app
            .db
            .live_mappings_in_cells(&ids, query.filter.project_id.as_deref(), limit as i64)
            .await?;
        rows.iter()
            .map(|m| {
                let v = query.filter.order.values(&mapping_as_instance(m));
                (v, PartialServer::from_mapping(m))
            })
            .collect()
    } else if app.skip_down_cells {
        Vec::new()
    } else {
        // `[api] list_records_by_skipping_down_cells = false`: fail, as
        // upstream, but saying which cell.
        let (_, d) = down.into_iter().next().expect("not empty");
        return Err(ApiError::cell_down(d));
    };
    let mut page = combine(&query.filter.order, merged, partials, limit);
    if detail {
        with_details(app, ctx, &sources, &mut page).await?;
        current_zones(app, ctx, page.iter_mut().filter_map(|(_, e)| e.full_mut())).await?;
    }
    let entries = page.into_iter().map(|(_, e)| e).collect();
    Ok(render(app, ctx, entries, detail, limit, raw))
}

/// A server of a list answer: read from its cell (or a build request), or
/// the partial record of a server in a down cell (2.69).
// Nearly every entry of a page is `Full`: boxing it would cost an
// allocation per row to save space only on the rare partial ones.
#[allow(clippy::large_enum_variant)]
enum Entry {
    Full(Server),
    Partial(PartialServer),
}

impl Entry {
    fn uuid(&self) -> &str {
        match self {
            Entry::Full(s) => &s.uuid,
            Entry::Partial(p) => &p.uuid,
        }
    }

    fn full_mut(&mut self) -> Option<&mut Server> {
        match self {
            Entry::Full(s) => Some(s),
            Entry::Partial(_) => None,
        }
    }
}

/// Whether a list shows the servers of down cells as partial records, as
/// Nova decides it: from 2.69, and only without paging, sorting or filters
/// (`all_tenants` excepted), since a partial record has neither the
/// values to sort or filter on nor a place in a page that the cell's rows
/// would have given it. Otherwise the down cells' servers are left out
/// (or the list fails, see `list_records_by_skipping_down_cells`).
fn partial_records(app: &App, ctx: &Ctx, raw: Option<&str>) -> bool {
    if !ctx.mv.at_least(PARTIAL_RECORDS_MV) {
        return false;
    }
    let q = parse_query(raw);
    if q.keys()
        .any(|k| PAGING_SORTING_PARAMS.contains(&k.as_str()))
    {
        return false;
    }
    // The options that count for this caller (the same as the search
    // reads), `all_tenants` aside.
    server_filters::search_options(app, ctx, &q)
        .keys()
        .all(|k| k == "all_tenants")
}

/// A mapping as the instance row its partial record stands for: the
/// values it has (uuid, project, user, creation time) and defaults for the
/// rest, for the sort values of the listing's default order.
fn mapping_as_instance(m: &MappingRow) -> CellInstance {
    CellInstance {
        uuid: m.instance_uuid.clone(),
        project_id: m.project_id.clone(),
        user_id: m.user_id.clone().unwrap_or_default(),
        created_at: m.created_at,
        ..CellInstance::default()
    }
}

/// Whether every key of `order` is one a mapping holds exactly (the
/// creation time, the uuid, the project), so that a server of a down cell
/// still has its place in the order.
fn mapping_orders(order: &ListOrder) -> bool {
    order
        .keys
        .iter()
        .all(|(k, _)| matches!(k, SortKey::CreatedAt | SortKey::Uuid | SortKey::ProjectId))
}

/// The page: the rows read from the cells (each with its source) and the
/// partial records, one sorted sequence by `order` (partial records only
/// come with the default order, whose values a mapping has: its creation
/// time is the server's), cut to `limit`. A server both read and partial
/// (its cell went down during the listing) is shown read.
fn combine(
    order: &ListOrder,
    merged: Vec<(usize, Vec<SortValue>, Server)>,
    mut partials: Vec<(Vec<SortValue>, PartialServer)>,
    limit: usize,
) -> Vec<(Option<usize>, Entry)> {
    if partials.is_empty() {
        return merged
            .into_iter()
            .map(|(src, _, s)| (Some(src), Entry::Full(s)))
            .collect();
    }
    let read: HashSet<String> = merged.iter().map(|(_, _, s)| s.uuid.clone()).collect();
    partials.retain(|(_, p)| !read.contains(&p.uuid));
    partials.sort_by(|a, b| order.cmp(&a.0, &b.0));
    let mut out = Vec::with_capacity(limit.min(merged.len() + partials.len()));
    let mut a = merged.into_iter().peekable();
    let mut b = partials.into_iter().peekable();
    while out.len() < limit {
        let take_read = match (a.peek(), b.peek()) {
            (Some((_, va, _)), Some((vb, _))) => order.cmp(va, vb) != std::cmp::Ordering::Greater,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        if take_read {
            let (src, _, s) = a.next().expect("peeked");
            out.push((Some(src), Entry::Full(s)));
        } else {
            let (_, p) = b.next().expect("peeked");
            out.push((None, Entry::Partial(p)));
        }
    }
    out
}

/// The build requests (filtered and sorted) and one source per cell (read
/// lazily by [`merge`]).
async fn sources(app: &App, q: &Query<'_>) -> ApiResult<Vec<Source>> {
    let f = &q.filter;
    let changed_ok = |t: DateTime<Utc>| {
        f.changes_since.is_none_or(|s| t >= s) && f.changes_before.is_none_or(|b| t <= b)
    };
    let mut builds: Vec<(Vec<SortValue>, Server)> = Vec::new();
    // Build requests are never deleted rows nor on a host; they have no
    // tags and are never locked.
    let none_can_match = f.only_deleted
        || f.host.is_some()
        || !f.tags.is_empty()
        || !f.tags_any.is_empty()
        || f.locked == Some(true);
    if !none_can_match {
        for b in app.db.build_requests(f.project_id.as_deref()).await? {
            let i = build_as_instance(&b.instance);
            let v = f.order.values(&i);
            if build_matches(f, q.matchers, &b.instance, &i)
                && changed_ok(b.instance.created_at)
                && is_after(&f.order, &v, f.after.as_ref())
            {
                builds.push((v, Server::from_build(&b.instance)));
            }
        }
    }
    builds.sort_by(|a, b| f.order.cmp(&a.0, &b.0));
    let mut out = vec![Source {
        cell: None,
        rows: builds.into(),
        after: None,
        done: true,
        down: None,
    }];
    for cell in app.cells.all() {
        out.push(Source {
            cell: Some(cell),
            rows: VecDeque::new(),
            after: f.after.clone(),
            done: false,
            down: None,
        });
    }
    Ok(out)
}

/// Whether a build request passes a listing's filters, as upstream's
/// `BuildRequestList.get_by_filters` decides it: the exact filters on the
/// values it has (vm_state `building`, task_state `scheduling`, its image,
/// flavor, user and uuid), the regex filters passing what it does not have
/// yet ([`Matchers::build_ok`]).
fn build_matches(f: &ListFilter, m: &Matchers, b: &BuildInstance, i: &CellInstance) -> bool {
    let exact = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    (f.vm_states.is_empty() || f.vm_states.iter().any(|s| s == vs::BUILDING))
        && (f.task_states.is_empty() || f.task_states.iter().any(|s| s == ts::SCHEDULING))
        && exact(&f.uuid, &b.uuid)
        && exact(&f.user_id, &b.user_id)
        && exact(&f.image_ref, &b.image_ref)
        && exact(&f.flavorid, &b.flavor.flavorid)
        && m.build_ok(i, b.key_name.as_deref())
}

/// The first `limit` rows of all sources in order (each with the index of
/// its source and its sort values). A server seen twice (a build that
/// landed in its cell between the reads) is shown once. A cell that does
/// not answer gives no rows (its source says why).
async fn merge(
    q: &Query<'_>,
    sources: &mut [Source],
    limit: usize,
) -> ApiResult<Vec<(usize, Vec<SortValue>, Server)>> {
    // cell0 holds only the builds that found no host: it is read like any
    // cell but not counted when the page is shared out, so that the cells
    // that hold the servers are each asked for enough in one round.
    let cells = sources
        .iter()
        .filter(|s| s.cell.as_ref().is_some_and(|c| !c.is_cell0()))
        .count()
        .max(1);
    // First pages: a cell's share of the page and a margin.
    let mut want = (limit as i64 * 11 / 10 / cells as i64 + 8).min(MAX_PAGE);
    let mut out: Vec<(usize, Vec<SortValue>, Server)> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    while out.len() < limit {
        let refills = sources
            .iter_mut()
            .filter(|s| s.rows.is_empty() && !s.done)
            .map(|s| s.refill(q, want));
        for r in futures_util::future::join_all(refills).await {
            r?;
        }
        // Later pages: what the page may still need from one cell.
        want = (limit - out.len()) as i64 + 1;
        let best = sources
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.rows.front().map(|(v, _)| (i, v)))
            .min_by(|a, b| q.filter.order.cmp(a.1, b.1))
            .map(|(i, _)| i);
        let Some(i) = best else { break };
        let (v, s) = sources[i].rows.pop_front().expect("front seen");
        if seen.insert(s.uuid.clone()) {
            out.push((i, v, s));
        }
    }
    Ok(out)
}

/// Metadata, tags and faults of the page's servers read from cells (one
/// bounded read per cell, in parallel), and key names from the API
/// database; the order is kept. A cell that stops answering between the
/// list read and this one fails the request (its rows were read but
/// cannot be completed).
async fn with_details(
    app: &App,
    ctx: &Ctx,
    sources: &[Source],
    page: &mut [(Option<usize>, Entry)],
) -> ApiResult<()> {
    let mut wanted: HashMap<usize, (Vec<String>, Vec<String>)> = HashMap::new();
    for (src, e) in page.iter() {
        if let (Some(src), Entry::Full(s)) = (src, e) {
            if sources[*src].cell.is_none() {
                continue;
            }
            let w = wanted.entry(*src).or_default();
            w.0.push(s.uuid.clone());
            if s.vm_state == vs::ERROR {
                w.1.push(s.uuid.clone());
            }
        }
    }
    let jobs = wanted.into_iter().map(|(src, (uuids, errs))| async move {
        let cell = sources[src].cell.as_ref().expect("cell sources only");
        let read = app
            .cells
            .read(cell, |db| CellDetails::read(db, uuids, errs))
            .await;
        (src, read)
    });
    let ids: Vec<String> = page
        .iter()
        .filter_map(|(_, e)| match e {
            Entry::Full(s) => Some(s.uuid.clone()),
            _ => None,
        })
        .collect();
    // The cells' details and what the API database's request specs add
    // (key names, the zone asked for, extra specs, hints: only the specs
    // that hold one are read) at the same time: neither needs the other.
    let (reads, views) = futures_util::future::join(
        futures_util::future::join_all(jobs),
        app.db
            .spec_views(&ids, ctx.mv.at_least(IMAGE_PROPERTIES_MV)),
    )
    .await;
    let mut views = views?;
    for (src, read) in reads {
        let details = read?;
        details.apply(page.iter_mut().filter_map(|(s, e)| {
            if *s == Some(src) {
                e.full_mut()
            } else {
                None
            }
        }));
    }
    for s in page.iter_mut().filter_map(|(_, e)| e.full_mut()) {
        if let Some(v) = views.remove(&s.uuid) {
            s.apply_spec(v);
        }
    }
    Ok(())
}

/// `{"servers": [...], "servers_links": [...]}`, serialized straight from
/// the servers.
fn render(
    app: &App,
    ctx: &Ctx,
    mut all: Vec<Entry>,
    detail: bool,
    limit: usize,
    raw: Option<&str>,
) -> Response {
    // As upstream: a full page links to the next one.
    let more = limit > 0 && all.len() >= limit;
    all.truncate(limit);
    let base = app.public_url();
    let next = more.then(|| all.last()).flatten().map(|last| {
        let mut q: Vec<String> = raw
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty() && !p.starts_with("marker="))
            .map(str::to_owned)
            .collect();
        q.push(format!("marker={}", last.uuid()));
        let path = if detail { "servers/detail" } else { "servers" };
        format!("{base}/v2.1/{path}?{}", q.join("&"))
    });
    let page = Page {
        base: &base,
        ctx,
        servers: &all,
        detail,
        next,
    };
    // Sized for the page up front: a thousand detailed servers are about
    // 1.4 MB (1.4 KB each), and growing the buffer as it fills copies it over and over.
    let per_server = if detail { 1600 } else { 160 };
    let mut body = Vec::with_capacity(256 + page.servers.len() * per_server);
    match serde_json::to_writer(&mut body, &page) {
        Ok(()) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(e) => ApiError::internal(e).into_response(),
    }
}

/// A list answer.
struct Page<'a> {
    base: &'a str,
    ctx: &'a Ctx,
    servers: &'a [Entry],
    detail: bool,
    next: Option<String>,
}

impl serde::Serialize for Page<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        struct Servers<'b>(&'b Page<'b>);
        impl serde::Serialize for Servers<'_> {
            fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
                let p = self.0;
                let mut seq = ser.serialize_seq(Some(p.servers.len()))?;
                for e in p.servers {
                    match (e, p.detail) {
                        (Entry::Full(s), true) => seq.serialize_element(&DetailView {
                            base: p.base,
                            ctx: p.ctx,
                            s,
                        })?,
                        (Entry::Full(s), false) => seq.serialize_element(&brief_view(p.base, s))?,
                        (Entry::Partial(partial), detail) => {
                            seq.serialize_element(&PartialView {
                                base: p.base,
                                p: partial,
                                kind: if detail {
                                    PartialKind::Detail
                                } else {
                                    PartialKind::Index
                                },
                            })?
                        }
                    }
                }
                seq.end()
            }
        }
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("servers", &Servers(self))?;
        if let Some(href) = &self.next {
            m.serialize_entry("servers_links", &[json!({"rel": "next", "href": href})])?;
        }
        m.end()
    }
}

/// The sort values of the marker server (deleted ones too: a
/// changes-since page may end on one). A marker in a down cell keeps its
/// place when the order's keys are all ones its mapping holds (the
/// default order: a page that ended on a partial record goes on);
/// otherwise its position is unknown and the request fails naming the
/// cell.
async fn marker_position(app: &App, order: &ListOrder, marker: &str) -> ApiResult<Vec<SortValue>> {
    let not_found = || bad(format!("marker [{marker}] not found"));
    let Some(m) = app.db.mapping_row(marker).await? else {
        return Err(not_found());
    };
    let row = match m.cell_id {
        None => {
            let b = app.db.build_request(marker).await?.ok_or_else(not_found)?;
            build_as_instance(&b.instance)
        }
        Some(cid) => {
            let cell = app.cells.by_id(cid).ok_or_else(not_found)?;
            let read = app
                .cells
                .read(&cell, |db| async move { db.api_instance(marker).await })
                .await;
            match read {
                Ok(row) => row.ok_or_else(not_found)?,
                Err(CellError::Down(_)) if mapping_orders(order) => mapping_as_instance(&m),
                Err(CellError::Down(d)) => {
                    return Err(ApiError::CellDown {
                        message: format!(
                            "Cell {} is not responding, hence the marker server {marker} \
                             cannot be placed in this sort order; try again later, or page \
                             in the default order.",
                            d.cell
                        ),
                        source: d,
                    })
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    Ok(order.values(&row))
}

/// `GET /servers`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    query_schema::SERVER_LIST.check(ctx.mv, raw.as_deref())?;
    list(&app, &ctx, raw.as_deref(), false).await
}

/// `GET /servers/detail`.
pub async fn index_detail(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    query_schema::SERVER_LIST.check(ctx.mv, raw.as_deref())?;
    list(&app, &ctx, raw.as_deref(), true).await
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;

    fn mapping(uuid: &str, second: u32) -> MappingRow {
        MappingRow {
            instance_uuid: uuid.into(),
            cell_id: Some(2),
            project_id: "p".into(),
            user_id: Some("u".into()),
            queued_for_delete: false,
            created_at: Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, second).unwrap(),
        }
    }

    fn read(order: &ListOrder, uuid: &str, second: u32) -> (usize, Vec<SortValue>, Server) {
        let i = mapping_as_instance(&mapping(uuid, second));
        (1, order.values(&i), Server::from_cell(i))
    }

    fn partial(order: &ListOrder, uuid: &str, second: u32) -> (Vec<SortValue>, PartialServer) {
        let m = mapping(uuid, second);
        (
            order.values(&mapping_as_instance(&m)),
            PartialServer::from_mapping(&m),
        )
    }

    fn uuids(page: &[(Option<usize>, Entry)]) -> Vec<(&str, bool)> {
        page.iter()
            .map(|(_, e)| (e.uuid(), matches!(e, Entry::Partial(_))))
            .collect()
    }

    #[test]
    fn partial_records_take_their_place_in_the_default_order() {
        let order = ListOrder::default();
        let merged = vec![
            read(&order, "a", 5),
            read(&order, "c", 3),
            read(&order, "e", 1),
        ];
        // Out of order on purpose, and "c" both read and partial (its cell
        // went down during the listing): shown read, once.
        let partials = vec![
            partial(&order, "d", 2),
            partial(&order, "b", 4),
            partial(&order, "c", 3),
            partial(&order, "f", 0),
        ];
        let page = combine(&order, merged, partials, 10);
        assert_eq!(
            uuids(&page),
            [
                ("a", false),
                ("b", true),
                ("c", false),
                ("d", true),
                ("e", false),
                ("f", true)
            ]
        );
        // Cut to the limit, newest first whatever their kind.
        let merged = vec![read(&order, "a", 5), read(&order, "c", 3)];
        let partials = vec![partial(&order, "b", 4), partial(&order, "d", 2)];
        let page = combine(&order, merged, partials, 2);
        assert_eq!(uuids(&page), [("a", false), ("b", true)]);
    }

    #[test]
    fn only_orders_a_mapping_holds_place_a_marker_of_a_down_cell() {
        let key = |k: SortKey| ListOrder {
            keys: vec![
                (k, false),
                (SortKey::CreatedAt, true),
                (SortKey::Uuid, true),
            ],
        };
        assert!(mapping_orders(&ListOrder::default()));
        assert!(mapping_orders(&key(SortKey::ProjectId)));
        assert!(!mapping_orders(&key(SortKey::DisplayName)));
        assert!(!mapping_orders(&key(SortKey::UserId)));
    }
}
