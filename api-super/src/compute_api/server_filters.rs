//! The search options of `GET /servers` and `/servers/detail`, read as
//! Nova reads them (`servers.py` `_get_servers`, `compute/api.py`
//! `get_all` and the cell database's `instance_get_all_by_filters_sort`):
//! which options a caller may use at its microversion, which are matched
//! exactly (in each cell's SQL: [`ListFilter`]) and which as regular
//! expressions on a column's text (here, on the rows read:
//! [`Matchers`]), and the options this cloud refuses because it keeps no
//! value for them.

use std::collections::HashMap;

use cell_mapping::db::{CellInstance, ListFilter};
use chrono::{DateTime, Utc};
use fabric::rpc::vm_state as vs;
use regex::Regex;

use super::error::{ApiError, ApiResult};
use super::microversion::Version;
use super::query_schema;
use super::servers::decode;
use super::servers::model::task_and_vm_states_from_statuses;
use super::{App, Ctx};

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// Query parameters that page or sort (Nova's `PAGING_SORTING_PARAMS`).
pub(crate) const PAGING_SORTING_PARAMS: &[&str] = &["sort_key", "sort_dir", "limit", "marker"];

/// The search options Nova lets a caller without
/// `os_compute_api:servers:allow_all_filters` use at `mv` (others are
/// dropped from the query, so they do not count as filters).
pub(crate) fn allowed_search_options(mv: Version) -> Vec<&'static str> {
    let mut o = vec![
        "reservation_id",
        "name",
        "status",
        "image",
        "flavor",
        "ip",
        "changes-since",
        "all_tenants",
    ];
    if mv.at_least(5) {
        o.push("ip6");
    }
    if mv.at_least(26) {
        o.extend(TAG_FILTERS);
    }
    if mv.at_least(66) {
        o.push("changes-before");
    }
    if mv.at_least(73) {
        o.push("locked");
    }
    if mv.at_least(83) {
        o.extend([
            "availability_zone",
            "config_drive",
            "key_name",
            "created_at",
            "launched_at",
            "terminated_at",
            "power_state",
            "task_state",
            "vm_state",
            "progress",
            "user_id",
        ]);
    }
    if mv.at_least(90) {
        o.push("hostname");
    }
    o
}

const TAG_FILTERS: [&str; 4] = ["tags", "tags-any", "not-tags", "not-tags-any"];

/// Options the query schema of `mv` does not know, for everyone: Nova's
/// schema strips them before 2.75 (from 2.75 the list refuses them before
/// it reads its query: [`query_schema::SERVER_LIST`]).
fn unknown_at(mv: Version, k: &str) -> bool {
    !query_schema::SERVER_LIST.knows(mv, k)
}

/// Nova's filters on joined tables: always a 400.
const JOINED_TABLE_PARAMS: &[&str] = &[
    "block_device_mapping",
    "services",
    "metadata",
    "system_metadata",
    "info_cache",
    "security_groups",
    "pci_devices",
];

/// Filters upstream accepts on columns this cloud never fills (every
/// server shows the same empty value): a 400 that says so rather than an
/// answer that filters on nothing.
pub(crate) const UNSUPPORTED_FILTERS: &[&str] = &[
    "auto_disk_config",
    "config_drive",
    "kernel_id",
    "ramdisk_id",
    "root_device_name",
];

/// A column a search option matches as a regular expression (upstream's
/// regex filters: anything not matched exactly), on its text: numbers in
/// decimal, times as `YYYY-MM-DD HH:MM:SS` (UTC, as upstream's database
/// renders them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Col {
    DisplayName,
    ReservationId,
    AvailabilityZone,
    Node,
    Hostname,
    LockedBy,
    LaunchIndex,
    PowerState,
    Progress,
    CreatedAt,
    LaunchedAt,
    TerminatedAt,
    Description,
    AccessIpV4,
    AccessIpV6,
}

/// The regex search options and their columns (`key_name` aside: it is
/// kept in the API database).
const REGEX_OPTIONS: &[(&str, Col)] = &[
    ("name", Col::DisplayName),
    ("display_name", Col::DisplayName),
    ("reservation_id", Col::ReservationId),
    ("availability_zone", Col::AvailabilityZone),
    ("node", Col::Node),
    ("hostname", Col::Hostname),
    ("locked_by", Col::LockedBy),
    ("launch_index", Col::LaunchIndex),
    ("power_state", Col::PowerState),
    ("progress", Col::Progress),
    ("created_at", Col::CreatedAt),
    ("launched_at", Col::LaunchedAt),
    ("terminated_at", Col::TerminatedAt),
    ("description", Col::Description),
    ("display_description", Col::Description),
    ("access_ip_v4", Col::AccessIpV4),
    ("access_ip_v6", Col::AccessIpV6),
];

impl Col {
    fn is_number(self) -> bool {
        matches!(self, Col::LaunchIndex | Col::PowerState | Col::Progress)
    }

    /// The column's text in `i` (`None`: NULL).
    fn text(self, i: &CellInstance) -> Option<String> {
        let time = |t: Option<DateTime<Utc>>| t.map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string());
        match self {
            Col::DisplayName => i.display_name.clone(),
            Col::ReservationId => i.reservation_id.clone(),
            Col::AvailabilityZone => i.availability_zone.clone(),
            Col::Node => i.node.clone(),
            Col::Hostname => i.hostname.clone(),
            Col::LockedBy => i.locked_by.clone(),
            Col::LaunchIndex => i.launch_index.map(|v| v.to_string()),
            Col::PowerState => i.power_state.map(|v| v.to_string()),
            Col::Progress => i.progress.map(|v| v.to_string()),
            Col::CreatedAt => time(Some(i.created_at)),
            Col::LaunchedAt => time(i.launched_at),
            Col::TerminatedAt => time(i.terminated_at),
            Col::Description => i.display_description.clone(),
            Col::AccessIpV4 => i.access_ip_v4.clone(),
            Col::AccessIpV6 => i.access_ip_v6.clone(),
        }
    }
}

/// The regex filters of a listing.
#[derive(Debug, Default)]
pub(crate) struct Matchers {
    cols: Vec<(Col, Regex)>,
    /// `key_name` (matched on the API database's key names).
    pub(crate) key_name: Option<Regex>,
}

impl Matchers {
    /// Whether a cell's row passes the column filters (a NULL column
    /// matches no expression, as in upstream's SQL).
    pub(crate) fn row_ok(&self, i: &CellInstance) -> bool {
        self.cols
            .iter()
            .all(|(c, re)| c.text(i).is_some_and(|t| re.is_match(&t)))
    }

    /// Whether a cell's row passes the `key_name` filter, given its key
    /// name (`None`: it has none).
    pub(crate) fn key_ok(&self, key_name: Option<&str>) -> bool {
        self.key_name
            .as_ref()
            .is_none_or(|re| key_name.is_some_and(|k| re.is_match(k)))
    }

    /// Whether a build request (as the row it will become, with its key
    /// name) passes, as upstream's `BuildRequestList.get_by_filters`
    /// decides it: a value the build does not have yet (empty, zero) passes
    /// every expression.
    pub(crate) fn build_ok(&self, i: &CellInstance, key_name: Option<&str>) -> bool {
        let passes = |v: Option<String>, number: bool, re: &Regex| match v {
            None => true,
            Some(v) if v.is_empty() || (number && v == "0") => true,
            Some(v) => re.is_match(&v),
        };
        self.cols
            .iter()
            .all(|(c, re)| passes(c.text(i), c.is_number(), re))
            && self
                .key_name
                .as_ref()
                .is_none_or(|re| passes(key_name.map(str::to_owned), false, re))
    }

    /// Whether there is any regex filter (rows must be checked here).
    pub(crate) fn is_empty(&self) -> bool {
        self.cols.is_empty() && self.key_name.is_none()
    }
}

/// A listing's search, as read from the query.
#[derive(Debug, Default)]
pub(crate) struct Search {
    /// The exact filters, for each cell's SQL (`order`, `after`, `limit`
    /// and `project_id` are the caller's to set).
    pub(crate) filter: ListFilter,
    /// The regex filters.
    pub(crate) matchers: Matchers,
    /// `all_tenants` is true.
    pub(crate) all_tenants: bool,
    /// The answer is an empty list whatever the cells hold: an unknown
    /// status before 2.38, or an `ip`/`ip6` filter (this region has no
    /// network service, so no server has an address to match).
    pub(crate) nothing: bool,
}

/// Nova's `strutils.bool_from_string(v, strict=True)`.
fn strict_bool(v: &str) -> ApiResult<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "on" | "y" | "yes" => Ok(true),
        "0" | "f" | "false" | "off" | "n" | "no" => Ok(false),
        _ => Err(bad(format!(
            "Invalid input received: Unrecognized value '{v}', acceptable values are: \
             '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'"
        ))),
    }
}

/// Nova's `strutils.bool_from_string(v)` (anything unknown is false).
fn lenient_bool(v: &str) -> bool {
    strict_bool(v).unwrap_or(false)
}

/// Whether a query parameter is a true boolean, as Nova reads `all_tenants`.
pub(crate) fn truthy(v: &str) -> bool {
    !matches!(
        v.to_ascii_lowercase().as_str(),
        "0" | "false" | "off" | "no"
    )
}

/// Every value of `name` in the query, in order.
fn all_values(raw: Option<&str>, name: &str) -> Vec<String> {
    raw.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k) == name).then(|| decode(v))
        })
        .collect()
}

/// The search options that count for this caller: the query's parameters
/// (the last value of each) without the paging and sorting ones, and,
/// for a caller without `os_compute_api:servers:allow_all_filters`, only
/// the options its microversion lets it use (others are dropped, as
/// upstream does).
pub(crate) fn search_options(
    app: &App,
    ctx: &Ctx,
    q: &HashMap<String, String>,
) -> HashMap<String, String> {
    let all_filters = app
        .authorize(
            ctx,
            "os_compute_api:servers:allow_all_filters",
            ctx.project_id(),
        )
        .is_ok();
    let allowed = allowed_search_options(ctx.mv);
    q.iter()
        .filter(|(k, _)| !PAGING_SORTING_PARAMS.contains(&k.as_str()))
        .filter(|(k, _)| !unknown_at(ctx.mv, k))
        .filter(|(k, _)| all_filters || allowed.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The tags of the tag filter `name` (comma-separated), sorted and
/// distinct. Each tag is a subquery, so a list is bounded by the most
/// tags a server can have: more could never all match, nor add a match.
fn tag_list(opts: &HashMap<String, String>, name: &str) -> ApiResult<Vec<String>> {
    let mut v: Vec<String> = opts
        .get(name)
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    v.sort();
    v.dedup();
    let max = crate::compute_api::server_metadata::MAX_TAGS;
    if v.len() as i64 > max {
        return Err(bad(format!(
            "Invalid {name}: at most {max} tags (a server has at most {max})."
        )));
    }
    Ok(v)
}

/// Reads the search of a listing (everything but paging and sorting).
pub(crate) fn parse(
    app: &App,
    ctx: &Ctx,
    raw: Option<&str>,
    q: &HashMap<String, String>,
) -> ApiResult<Search> {
    let opts = search_options(app, ctx, q);
    let mut s = Search::default();
    for k in opts.keys() {
        if JOINED_TABLE_PARAMS.contains(&k.as_str()) || k.starts_with('_') {
            return Err(bad(format!("Invalid filter field: {k}.")));
        }
    }
    let f = &mut s.filter;
    // Status: every value, ORed, as vm_state and task_state filters.
    if opts.contains_key("status") {
        let statuses = all_values(raw, "status");
        let (vm, task) = task_and_vm_states_from_statuses(&statuses);
        if vm.is_empty() {
            if ctx.mv.at_least(38) {
                return Err(bad("Invalid status value"));
            }
            s.nothing = true;
            return Ok(s);
        }
        f.vm_states = vm;
        if let Some(task) = task {
            f.task_states = task;
        } else if let Some(t) = opts.get("task_state") {
            f.task_states = vec![t.clone()];
        }
    } else {
        if let Some(v) = opts.get("vm_state") {
            f.vm_states = vec![v.clone()];
        }
        if let Some(t) = opts.get("task_state") {
            f.task_states = vec![t.clone()];
        }
    }
    let time = |name: &str| -> ApiResult<Option<DateTime<Utc>>> {
        opts.get(name)
            .map(|s| super::instance_actions::parse_time(name, s))
            .transpose()
    };
    f.changes_since = time("changes-since")?;
    f.changes_before = time("changes-before")?;
    if let (Some(a), Some(b)) = (f.changes_since, f.changes_before) {
        if a > b {
            return Err(bad(
                "The value of changes-since must be less than or equal to changes-before.",
            ));
        }
    }
    // Deleted servers: only with `deleted=true` (administrators) or
    // `status=DELETED`; with them `changes-since`/`changes-before`; never
    // otherwise (`deleted=false` included).
    match opts.get("deleted") {
        Some(d) => f.only_deleted = lenient_bool(d),
        None => f.include_deleted = f.changes_since.is_some() || f.changes_before.is_some(),
    }
    if f.vm_states == [vs::DELETED] {
        if !ctx.is_admin() {
            return Err(ApiError::Forbidden(
                "Only administrators may list deleted instances".into(),
            ));
        }
        f.only_deleted = true;
    }
    f.tags = tag_list(&opts, "tags")?;
    f.tags_any = tag_list(&opts, "tags-any")?;
    f.not_tags = tag_list(&opts, "not-tags")?;
    f.not_tags_any = tag_list(&opts, "not-tags-any")?;
    s.all_tenants = opts.get("all_tenants").is_some_and(|v| truthy(v));
    if let Some(l) = opts.get("locked") {
        f.locked = Some(strict_bool(l)?);
    }
    f.host = opts.get("host").cloned();
    f.uuid = opts.get("uuid").cloned();
    f.user_id = opts.get("user_id").cloned();
    f.image_ref = opts.get("image").or(opts.get("image_ref")).cloned();
    f.flavorid = opts.get("flavor").cloned();
    for (name, col) in REGEX_OPTIONS {
        if let Some(v) = opts.get(*name) {
            s.matchers.cols.push((*col, regex(v)?));
        }
    }
    if let Some(v) = opts.get("key_name") {
        s.matchers.key_name = Some(regex(v)?);
    }
    let mut unsupported: Vec<&str> = UNSUPPORTED_FILTERS
        .iter()
        .copied()
        .filter(|k| opts.contains_key(*k))
        .collect();
    unsupported.sort_unstable();
    if let Some(k) = unsupported.first() {
        return Err(bad(format!(
            "Filter {k} is not supported by this cloud: it keeps no {k} for its servers \
             (every server shows the same empty value)"
        )));
    }
    s.nothing = opts.contains_key("ip") || opts.contains_key("ip6");
    Ok(s)
}

fn regex(v: &str) -> ApiResult<Regex> {
    Regex::new(v).map_err(|_| bad(format!("Invalid regular expression: {v}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_filters_are_distinct_and_bounded_by_a_servers_tags() {
        let opts = |v: String| HashMap::from([("tags-any".to_owned(), v)]);
        assert_eq!(
            tag_list(&opts("b,a,b,a".into()), "tags-any").unwrap(),
            ["a", "b"]
        );
        let many = |n: usize| {
            (0..n)
                .map(|i| format!("t{i}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        assert_eq!(tag_list(&opts(many(50)), "tags-any").unwrap().len(), 50);
        let e = tag_list(&opts(many(51)), "tags-any").unwrap_err();
        assert!(e.to_string().contains("at most 50 tags"), "{e}");
        assert!(tag_list(&opts(many(51)), "tags").unwrap().is_empty());
    }

    #[test]
    fn statuses_map_to_vm_and_task_states_as_upstream() {
        let s = |v: &[&str]| {
            task_and_vm_states_from_statuses(&v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
        };
        assert_eq!(s(&["ACTIVE"]), (vec!["active".to_owned()], None));
        assert_eq!(
            s(&["reboot"]),
            (
                vec!["active".to_owned()],
                Some(vec![
                    "reboot_pending".to_owned(),
                    "reboot_started".to_owned(),
                    "rebooting".to_owned()
                ])
            )
        );
        let (vm, task) = s(&["REBUILD"]);
        assert_eq!(vm, ["active", "error", "stopped"]);
        assert_eq!(
            task.unwrap(),
            [
                "rebuild_block_device_mapping",
                "rebuild_spawning",
                "rebuilding"
            ]
        );
        // A status that stands for a whole vm_state lifts the task filter.
        assert_eq!(
            s(&["REBOOT", "SHUTOFF"]),
            (vec!["active".to_owned(), "stopped".to_owned()], None)
        );
        assert_eq!(s(&["BOGUS"]).0, Vec::<String>::new());
        assert_eq!(s(&["DELETED"]), (vec!["deleted".to_owned()], None));
    }

    fn row() -> CellInstance {
        CellInstance {
            uuid: "u".into(),
            project_id: "p".into(),
            user_id: "u".into(),
            display_name: Some("web-1".into()),
            power_state: Some(0),
            reservation_id: Some("r-abc".into()),
            launch_index: Some(0),
            created_at: chrono::TimeZone::with_ymd_and_hms(&Utc, 2024, 5, 1, 10, 0, 0).unwrap(),
            progress: Some(0),
            ..CellInstance::default()
        }
    }

    #[test]
    fn regex_filters_on_rows_and_on_build_requests() {
        let m = |col: Col, re: &str| Matchers {
            cols: vec![(col, Regex::new(re).unwrap())],
            key_name: None,
        };
        let r = row();
        assert!(m(Col::DisplayName, "^web").row_ok(&r));
        assert!(!m(Col::DisplayName, "db").row_ok(&r));
        assert!(m(Col::CreatedAt, "^2024-05-01 10:").row_ok(&r));
        assert!(m(Col::PowerState, "0").row_ok(&r));
        // NULL matches nothing in a cell...
        assert!(!m(Col::AvailabilityZone, "").row_ok(&r));
        assert!(!m(Col::Node, "x").row_ok(&r));
        // ...while a build passes on what it does not have yet.
        assert!(m(Col::Node, "x").build_ok(&r, None));
        assert!(m(Col::PowerState, "4").build_ok(&r, None));
        assert!(!m(Col::DisplayName, "db").build_ok(&r, None));
        let k = Matchers {
            cols: Vec::new(),
            key_name: Some(Regex::new("^k1$").unwrap()),
        };
        assert!(k.key_ok(Some("k1")) && !k.key_ok(Some("k2")) && !k.key_ok(None));
        assert!(k.build_ok(&r, None) && !k.build_ok(&r, Some("k2")));
    }

    #[test]
    fn booleans_as_upstream() {
        assert!(strict_bool("True").unwrap());
        assert!(!strict_bool("off").unwrap());
        assert!(strict_bool("maybe").is_err());
        assert!(!lenient_bool("maybe"));
    }
}
