//! `GET /allocation_candidates` (microversions 1.10 to 1.39).
//!
//! Parses and validates the query string the way upstream does (its JSON
//! schema per microversion, then `RequestWideParams` and
//! `RequestGroup.dict_from_request`, with upstream's messages and error
//! codes), checks that every named resource class and trait exists, asks the
//! in-memory engine, and renders the answer in the shape of the requested
//! microversion.

use std::collections::BTreeSet;

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
use uuid::Uuid;

use super::query::Query;
use super::AppState;
use crate::auth::Caller;
use crate::engine::{
    AggregateUuid, AllocationCandidates, AllocationRequest, CandidateOrder, CandidatesRequest,
    GroupPolicy, ProviderSummary, RequestGroup,
};
use crate::error::{ErrorCode, PlacementError, Result};
use crate::microversion::Microversion;

pub fn routes() -> Router<AppState> {
    Router::new().route("/allocation_candidates", get(list))
}

async fn list(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
) -> Result<Response> {
    if !mv.at_least(10) {
        return Err(PlacementError::not_found(
            "The resource could not be found.",
        ));
    }
    caller.authorize("placement:allocation_candidates:list")?;
    let q = Query::parse(raw.as_deref())?;
    let mut parsed = parse(&q, mv)?;
    if st.randomize_allocation_candidates {
        // A fresh seed per request: every limited query is another sample.
        parsed.request.order = CandidateOrder::Shuffle {
            seed: Uuid::new_v4().as_u64_pair().0,
        };
    }
    let requested: BTreeSet<String> = parsed
        .request
        .groups
        .iter()
        .flat_map(|g| g.resources.keys().cloned())
        .collect();
    let cands = st.placement.allocation_candidates(&parsed.request).await?;
    let body = serde_json::to_vec(&Rendered {
        cands: &cands,
        mv,
        requested: &requested,
    })
    .map_err(|e| {
        PlacementError::client(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Undefined,
            format!("cannot render allocation candidates: {e}"),
        )
    })?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

// ----- validation -----

fn bad(detail: impl Into<String>) -> PlacementError {
    PlacementError::bad_request(detail)
}

fn bad_value(detail: impl Into<String>) -> PlacementError {
    PlacementError::client(StatusCode::BAD_REQUEST, ErrorCode::QueryBadValue, detail)
}

/// Python's `repr` of a string, as upstream's messages show values.
fn py_repr(s: &str) -> String {
    if s.contains('\'') && !s.contains('"') {
        format!("\"{s}\"")
    } else {
        format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

/// Python's `repr` of a list of strings.
fn py_list<S: AsRef<str>>(items: &[S]) -> String {
    let inner: Vec<String> = items.iter().map(|s| py_repr(s.as_ref())).collect();
    format!("[{}]", inner.join(", "))
}

fn schema_error(message: String, failed: &str) -> PlacementError {
    bad(format!(
        "Invalid query string parameters: {message}\n\nFailed validating {failed}"
    ))
}

/// The query parameter families that may carry a group suffix.
const GROUP_PREFIXES: [&str; 4] = ["in_tree", "member_of", "required", "resources"];

/// Splits `key` into (prefix, suffix) when it names a request-group
/// parameter valid at `mv` (numeric suffixes from 1.25, any
/// `[a-zA-Z0-9_-]{1,64}` from 1.33).
fn group_key(key: &str, mv: Microversion) -> Option<(&'static str, &str)> {
    GROUP_PREFIXES.iter().find_map(|&prefix| {
        let suffix = key.strip_prefix(prefix)?;
        let ok = if suffix.is_empty() {
            true
        } else if mv.at_least(33) {
            suffix.len() <= 64
                && suffix
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        } else {
            suffix.as_bytes()[0] != b'0' && suffix.bytes().all(|b| b.is_ascii_digit())
        };
        ok.then_some((prefix, suffix))
    })
}

/// Upstream's JSON-schema check of the query string for microversion `mv`.
fn check_schema(q: &Query, mv: Microversion) -> Result<()> {
    let mut props: Vec<&str> = Vec::new();
    let granular = mv.at_least(25);
    if !granular {
        props.push("resources");
    }
    if mv.at_least(16) {
        props.push("limit");
    }
    if mv.at_least(17) && !granular {
        props.push("required");
    }
    if mv.at_least(21) && !granular {
        props.push("member_of");
    }
    if granular {
        props.push("group_policy");
    }
    if mv.at_least(35) {
        props.push("root_required");
    }
    if mv.at_least(36) {
        props.push("same_subtree");
    }
    let pattern_ok = |k: &str| {
        granular
            && group_key(k, mv).is_some_and(|(prefix, _)| prefix != "in_tree" || mv.at_least(31))
    };
    let extras: BTreeSet<&str> =
        q.0.iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !props.contains(k) && !pattern_ok(k))
            .collect();
    if !extras.is_empty() {
        let extras: Vec<&str> = extras.into_iter().collect();
        let joined = extras
            .iter()
            .map(|k| py_repr(k))
            .collect::<Vec<_>>()
            .join(", ");
        let message = if granular {
            let suffix = if mv.at_least(33) {
                "[a-zA-Z0-9_-]{1,64}"
            } else {
                "[1-9][0-9]*"
            };
            let prefixes: &[&str] = if mv.at_least(31) {
                &GROUP_PREFIXES
            } else {
                &GROUP_PREFIXES[1..]
            };
            let patterns: Vec<String> = prefixes
                .iter()
                .map(|p| format!("'^{p}({suffix})?$'"))
                .collect();
            let verb = if extras.len() == 1 { "does" } else { "do" };
            format!(
                "{joined} {verb} not match any of the regexes: {}",
                patterns.join(", ")
            )
        } else {
            let verb = if extras.len() == 1 { "was" } else { "were" };
            format!("Additional properties are not allowed ({joined} {verb} unexpected)")
        };
        return Err(schema_error(message, "'additionalProperties' in schema"));
    }
    if !granular && q.all("resources").is_empty() {
        return Err(schema_error(
            "'resources' is a required property".into(),
            "'required' in schema",
        ));
    }
    // jsonschema sees the last value of a repeated key.
    if let Some(limit) = q.all("limit").last() {
        if !is_positive_int(limit) {
            return Err(schema_error(
                format!("{} does not match '^[1-9][0-9]*$'", py_repr(limit)),
                "'pattern' in schema['properties']['limit']",
            ));
        }
    }
    if let Some(policy) = q.all("group_policy").last() {
        if !matches!(*policy, "none" | "isolate") {
            return Err(schema_error(
                format!("{} is not one of ['none', 'isolate']", py_repr(policy)),
                "'enum' in schema['properties']['group_policy']",
            ));
        }
    }
    Ok(())
}

fn is_positive_int(s: &str) -> bool {
    !s.is_empty() && !s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit())
}

/// A request parsed and validated, ready for the engine.
struct Parsed {
    request: CandidatesRequest,
}

/// `util.normalize_resources_qs_param`.
fn parse_resources(value: &str) -> Result<Vec<(String, u64)>> {
    const FORM: &str = "Badly formed resources parameter. Expected resources query string \
                        parameter in form: ?resources=VCPU:2,MEMORY_MB:1024.";
    if value.trim().is_empty() {
        return Err(bad(format!("{FORM} Got: empty string.")));
    }
    let mut out = Vec::new();
    for part in value.split(',') {
        let mut it = part.split(':');
        let (Some(rc), Some(amount), None) = (it.next(), it.next(), it.next()) else {
            return Err(bad(format!("{FORM} Got: {part}.")));
        };
        let n: i64 = amount.trim().parse().map_err(|_| {
            bad(format!(
                "Requested resource {rc} expected positive integer amount. Got: {amount}."
            ))
        })?;
        if n < 1 {
            return Err(bad(format!(
                "Requested resource {rc} requires amount >= 1. Got: {n}."
            )));
        }
        out.push((rc.to_owned(), n as u64));
    }
    Ok(out)
}

/// `util.normalize_traits_qs_param`: (AND of any-of sets, forbidden).
fn parse_traits(
    value: &str,
    allow_forbidden: bool,
    allow_any: bool,
) -> Result<(Vec<Vec<String>>, Vec<String>)> {
    let invalid = |m: String| bad(format!("Invalid query string parameters: {m}"));
    if let Some(list) = value.strip_prefix("in:") {
        if !allow_any {
            return Err(invalid(format!(
                "The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since \
                 microversion 1.39. Got: {value}"
            )));
        }
        let mut any: Vec<String> = list.split(',').map(|t| t.trim().to_owned()).collect();
        if any.iter().any(String::is_empty) {
            return Err(invalid(format!(
                "Expected 'required' parameter value of the form: \
                 in:HW_CPU_X86_VMX,CUSTOM_MAGIC. Got an empty trait in: {value}"
            )));
        }
        if any.iter().any(|t| t.starts_with('!')) {
            return Err(invalid(format!(
                "The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' does not support forbidden \
                 traits. Got: {value}"
            )));
        }
        any.sort();
        any.dedup();
        return Ok((vec![any], Vec::new()));
    }
    let all: Vec<&str> = value.split(',').map(str::trim).collect();
    let forbidden: Vec<String> = all
        .iter()
        .filter(|t| t.starts_with('!'))
        .map(|t| t.trim_start_matches('!').to_owned())
        .collect();
    if all.iter().any(|t| t.is_empty()) || forbidden.iter().any(String::is_empty) {
        let form = if allow_forbidden {
            "HW_CPU_X86_VMX,!CUSTOM_MAGIC"
        } else {
            "HW_CPU_X86_VMX,CUSTOM_MAGIC"
        };
        return Err(invalid(format!(
            "Expected 'required' parameter value of the form: {form}. Got an empty trait in: \
             {value}"
        )));
    }
    if !forbidden.is_empty() && !allow_forbidden {
        return Err(invalid(format!(
            "Expected 'required' parameter value of the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. \
             Got: {value}"
        )));
    }
    let required = all
        .iter()
        .filter(|t| !t.starts_with('!'))
        .map(|t| vec![(*t).to_owned()])
        .collect();
    Ok((required, forbidden))
}

fn uuid_like(s: &str) -> Option<Uuid> {
    Uuid::parse_str(s).ok()
}

/// `util.normalize_member_of_qs_params` for one group.
fn parse_member_of(
    values: &[&str],
    suffix: &str,
    mv: Microversion,
) -> Result<(Vec<Vec<AggregateUuid>>, Vec<AggregateUuid>)> {
    if !mv.at_least(24) && values.len() > 1 {
        return Err(bad(format!(
            "Multiple member_of{suffix} parameters are not supported"
        )));
    }
    let mut required = Vec::new();
    let mut forbidden: Vec<AggregateUuid> = Vec::new();
    for value in values {
        if value.contains(',') && !(value.starts_with("in:") || value.starts_with("!in:")) {
            return Err(bad(format!(
                "Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' \
                 keyword using the valid microversion. Got: {value}"
            )));
        }
        let (negative, list) = if let Some(l) = value.strip_prefix("!in:") {
            (true, l)
        } else if let Some(l) = value.strip_prefix('!') {
            (true, l)
        } else if let Some(l) = value.strip_prefix("in:") {
            (false, l)
        } else {
            (false, *value)
        };
        let mut aggs = Vec::new();
        for u in list.split(',') {
            let agg = uuid_like(u).ok_or_else(|| {
                bad(format!(
                    "Invalid query string parameters: Expected 'member_of' parameter to \
                     contain valid UUID(s). Got: {u}"
                ))
            })?;
            if !aggs.contains(&AggregateUuid(agg)) {
                aggs.push(AggregateUuid(agg));
            }
        }
        if negative {
            if !mv.at_least(32) {
                return Err(bad(format!(
                    "Forbidden member_of{suffix} parameters are not supported in the \
                     specified microversion"
                )));
            }
            for a in aggs {
                if !forbidden.contains(&a) {
                    forbidden.push(a);
                }
            }
        } else {
            required.push(aggs);
        }
    }
    Ok((required, forbidden))
}

/// Everything upstream checks before it looks at the database.
fn parse(q: &Query, mv: Microversion) -> Result<Parsed> {
    check_schema(q, mv)?;

    // RequestWideParams.from_request
    let limit = match q.all("limit").first() {
        Some(l) => Some(
            l.parse::<usize>()
                .ok()
                .filter(|_| is_positive_int(l))
                .ok_or_else(|| {
                    schema_error(
                        format!("{} does not match '^[1-9][0-9]*$'", py_repr(l)),
                        "'pattern' in schema['properties']['limit']",
                    )
                })?,
        ),
        None => None,
    };
    let group_policy = q.all("group_policy").first().map(|p| match *p {
        "isolate" => GroupPolicy::Isolate,
        _ => GroupPolicy::None,
    });
    let (mut root_required, mut root_forbidden) = (Vec::new(), Vec::new());
    let roots = q.all("root_required");
    if roots.len() > 1 {
        return Err(PlacementError::client(
            StatusCode::BAD_REQUEST,
            ErrorCode::QueryDuplicateKey,
            "Query parameter 'root_required' may be specified only once.",
        ));
    }
    if let Some(value) = roots.first() {
        let (required, forbidden) = parse_traits(value, true, false)?;
        root_required = required.into_iter().flatten().collect::<Vec<_>>();
        root_required.sort();
        root_required.dedup();
        root_forbidden = forbidden;
        root_forbidden.sort();
        root_forbidden.dedup();
        let conflicts: Vec<&str> = root_required
            .iter()
            .filter(|t| root_forbidden.contains(t))
            .map(String::as_str)
            .collect();
        if !conflicts.is_empty() {
            return Err(bad_value(format!(
                "Conflicting required and forbidden traits found in root_required: {}",
                conflicts.join(", ")
            )));
        }
    }
    let mut same_subtree: Vec<Vec<String>> = Vec::new();
    for value in q.all("same_subtree") {
        let mut set: Vec<String> = Vec::new();
        for s in value.split(',').map(str::trim) {
            if s.is_empty() {
                return Err(bad_value(
                    "Empty string (unsuffixed group) can not be specified in `same_subtree` ",
                ));
            }
            if !set.iter().any(|x| x == s) {
                set.push(s.to_owned());
            }
        }
        same_subtree.push(set);
    }

    // RequestGroup.dict_from_request: groups by suffix, in order of first
    // appearance.
    let allow_forbidden = mv.at_least(22);
    let allow_any = mv.at_least(39);
    let mut groups: Vec<RequestGroup> = Vec::new();
    for (key, value) in &q.0 {
        let Some((prefix, suffix)) = group_key(key, mv) else {
            continue;
        };
        let gi = match groups.iter().position(|g| g.suffix == suffix) {
            Some(i) => i,
            None => {
                groups.push(RequestGroup {
                    suffix: suffix.to_owned(),
                    ..RequestGroup::default()
                });
                groups.len() - 1
            }
        };
        let g = &mut groups[gi];
        match prefix {
            "resources" => g.resources = parse_resources(value)?.into_iter().collect(),
            "required" => {
                let values = q.all(key);
                // Before 1.39 only the last `required` counts.
                let values = if allow_any {
                    &values[..]
                } else {
                    &values[values.len() - 1..]
                };
                g.required.clear();
                g.forbidden.clear();
                for v in values {
                    let (required, forbidden) = parse_traits(v, allow_forbidden, allow_any)?;
                    g.required.extend(required);
                    for f in forbidden {
                        if !g.forbidden.contains(&f) {
                            g.forbidden.push(f);
                        }
                    }
                }
            }
            "member_of" => {
                let (required, forbidden) = parse_member_of(&q.all(key), suffix, mv)?;
                g.member_of = required;
                g.forbidden_aggregates = forbidden;
            }
            _ => {
                let v = value.trim();
                let tree = uuid_like(v).ok_or_else(|| {
                    bad(format!(
                        "Invalid query string parameters: Expected 'in_tree' parameter to be \
                         a format of uuid. Got: {value}"
                    ))
                })?;
                g.in_tree = Some(tree.into());
            }
        }
    }

    if mv.at_least(36) {
        let resourceless: Vec<&str> = groups
            .iter()
            .filter(|g| g.resources.is_empty())
            .map(|g| g.suffix.as_str())
            .collect();
        if resourceless.len() == groups.len() {
            return Err(PlacementError::client(
                StatusCode::BAD_REQUEST,
                ErrorCode::QueryMissingValue,
                "There must be at least one resources or resources[$S] parameter.",
            ));
        }
        let in_subtree = |s: &str| same_subtree.iter().flatten().any(|x| x == s);
        let mut orphans: Vec<&str> = resourceless
            .iter()
            .copied()
            .filter(|s| !in_subtree(s))
            .collect();
        if !orphans.is_empty() {
            orphans.sort_unstable();
            return Err(bad_value(format!(
                "Resourceless suffixed group request should be specified in `same_subtree` \
                 query param: bad group(s) - {}.",
                py_list(&orphans)
            )));
        }
        let mut unknown: Vec<&str> = same_subtree
            .iter()
            .flatten()
            .map(String::as_str)
            .filter(|s| !groups.iter().any(|g| g.suffix == *s))
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            unknown.dedup();
            let all: Vec<&str> = groups.iter().map(|g| g.suffix.as_str()).collect();
            return Err(bad_value(format!(
                "Real suffixes should be specified in `same_subtree`: {} not found in {}.",
                py_list(&unknown),
                py_list(&all)
            )));
        }
    } else {
        let orphans: Vec<String> = groups
            .iter()
            .filter(|g| !g.required.is_empty() && g.resources.is_empty())
            .map(|g| format!("required{}", g.suffix))
            .collect();
        if !orphans.is_empty() {
            return Err(bad(format!(
                "All traits parameters must be associated with resources.  Found the \
                 following orphaned traits keys: {}",
                orphans.join(", ")
            )));
        }
        let orphans: Vec<String> = groups
            .iter()
            .filter(|g| {
                g.resources.is_empty()
                    && (!g.member_of.is_empty() || !g.forbidden_aggregates.is_empty())
            })
            .map(|g| format!("member_of{}", g.suffix))
            .collect();
        if !orphans.is_empty() {
            return Err(bad(format!(
                "All member_of parameters must be associated with resources. Found the \
                 following orphaned member_of keys: {}",
                orphans.join(", ")
            )));
        }
        if groups.iter().any(|g| g.resources.is_empty()) {
            return Err(bad("All request groups must specify resources."));
        }
        if groups.is_empty() {
            return Err(bad(
                "At least one request group (`resources` or `resources{$S}`) is required.",
            ));
        }
    }

    if allow_forbidden {
        let mut conflicts: Vec<String> = Vec::new();
        for g in &groups {
            for any in &g.required {
                if any.iter().all(|t| g.forbidden.contains(t)) {
                    let mut names = any.clone();
                    names.sort();
                    conflicts.push(format!("required{}: ({})", g.suffix, names.join(", ")));
                }
            }
        }
        if !conflicts.is_empty() {
            conflicts.sort();
            return Err(bad(format!(
                "Conflicting required and forbidden traits found in the following traits \
                 keys: {}",
                conflicts.join(", ")
            )));
        }
    }

    let granular = groups.iter().filter(|g| g.use_same_provider()).count();
    if group_policy.is_none() && granular > 1 {
        return Err(bad(
            "The \"group_policy\" parameter is required when specifying more than one \
             \"resources{N}\" parameter.",
        ));
    }

    Ok(Parsed {
        request: CandidatesRequest {
            groups,
            group_policy: group_policy.unwrap_or_default(),
            same_subtree,
            root_required,
            root_forbidden,
            limit,
            nested_aware: mv.at_least(29),
            ..CandidatesRequest::default()
        },
    })
}

// ----- rendering -----

struct Rendered<'a> {
    cands: &'a AllocationCandidates,
    mv: Microversion,
    requested: &'a BTreeSet<String>,
}

impl Serialize for Rendered<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry(
            "allocation_requests",
            &Requests {
                reqs: &self.cands.allocation_requests,
                mv: self.mv,
            },
        )?;
        m.serialize_entry(
            "provider_summaries",
            &Summaries {
                sums: &self.cands.provider_summaries,
                mv: self.mv,
                requested: self.requested,
            },
        )?;
        m.end()
    }
}

struct Requests<'a> {
    reqs: &'a [AllocationRequest],
    mv: Microversion,
}

impl Serialize for Requests<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.reqs.len()))?;
        for r in self.reqs {
            seq.serialize_element(&OneRequest { r, mv: self.mv })?;
        }
        seq.end()
    }
}

struct OneRequest<'a> {
    r: &'a AllocationRequest,
    mv: Microversion,
}

/// `{"CLASS": amount, ...}`.
struct Amounts<'a>(&'a [(std::sync::Arc<str>, u64)]);

impl Serialize for Amounts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (rc, n) in self.0 {
            m.serialize_entry(&**rc, n)?;
        }
        m.end()
    }
}

#[derive(Serialize)]
struct ResourcesOnly<'a> {
    resources: Amounts<'a>,
}

#[derive(Serialize)]
struct ProviderRef {
    uuid: String,
}

#[derive(Serialize)]
struct ListAllocation<'a> {
    resource_provider: ProviderRef,
    resources: Amounts<'a>,
}

struct DictAllocations<'a>(&'a AllocationRequest);

impl Serialize for DictAllocations<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.allocations.len()))?;
        for a in &self.0.allocations {
            m.serialize_entry(
                &a.provider.to_string(),
                &ResourcesOnly {
                    resources: Amounts(&a.resources),
                },
            )?;
        }
        m.end()
    }
}

struct Mappings<'a>(&'a AllocationRequest);

impl Serialize for Mappings<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.mappings.len()))?;
        for (suffix, providers) in &self.0.mappings {
            let uuids: Vec<String> = providers.iter().map(ToString::to_string).collect();
            m.serialize_entry(&**suffix, &uuids)?;
        }
        m.end()
    }
}

impl Serialize for OneRequest<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let with_mappings = self.mv.at_least(34);
        let mut m = s.serialize_map(Some(1 + usize::from(with_mappings)))?;
        if self.mv.at_least(12) {
            m.serialize_entry("allocations", &DictAllocations(self.r))?;
        } else {
            let list: Vec<ListAllocation<'_>> = self
                .r
                .allocations
                .iter()
                .map(|a| ListAllocation {
                    resource_provider: ProviderRef {
                        uuid: a.provider.to_string(),
                    },
                    resources: Amounts(&a.resources),
                })
                .collect();
            m.serialize_entry("allocations", &list)?;
        }
        if with_mappings {
            m.serialize_entry("mappings", &Mappings(self.r))?;
        }
        m.end()
    }
}

struct Summaries<'a> {
    sums: &'a [ProviderSummary],
    mv: Microversion,
    requested: &'a BTreeSet<String>,
}

impl Serialize for Summaries<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.sums.len()))?;
        for p in self.sums {
            m.serialize_entry(
                &p.provider.to_string(),
                &OneSummary {
                    p,
                    mv: self.mv,
                    requested: self.requested,
                },
            )?;
        }
        m.end()
    }
}

struct OneSummary<'a> {
    p: &'a ProviderSummary,
    mv: Microversion,
    requested: &'a BTreeSet<String>,
}

#[derive(Serialize)]
struct CapacityUsed {
    capacity: u64,
    used: u64,
}

struct SummaryResources<'a>(&'a OneSummary<'a>);

impl Serialize for SummaryResources<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let all = self.0.mv.at_least(27);
        let mut m = s.serialize_map(None)?;
        for r in &self.0.p.resources {
            // Before 1.27 only the requested classes are shown.
            if all || self.0.requested.contains(&*r.resource_class) {
                m.serialize_entry(
                    &*r.resource_class,
                    &CapacityUsed {
                        capacity: r.capacity,
                        used: r.used,
                    },
                )?;
            }
        }
        m.end()
    }
}

impl Serialize for OneSummary<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("resources", &SummaryResources(self))?;
        if self.mv.at_least(17) {
            let traits: Vec<&str> = self.p.traits.iter().map(|t| &**t).collect();
            m.serialize_entry("traits", &traits)?;
        }
        if self.mv.at_least(29) {
            m.serialize_entry(
                "parent_provider_uuid",
                &self.p.parent.map(|u| u.to_string()),
            )?;
            m.serialize_entry("root_provider_uuid", &self.p.root.to_string())?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Query {
        Query::parse(Some(s)).unwrap()
    }

    fn err(s: &str, mv: u16) -> String {
        match parse(&q(s), Microversion(mv)) {
            Err(PlacementError::Client { detail, .. }) => detail,
            Err(e) => panic!("unexpected {e:?}"),
            Ok(_) => panic!("{s} at 1.{mv} parsed"),
        }
    }

    #[test]
    fn group_keys_follow_the_microversion() {
        assert_eq!(
            group_key("resources1", Microversion(25)),
            Some(("resources", "1"))
        );
        assert_eq!(group_key("resources01", Microversion(25)), None);
        assert_eq!(group_key("resources_A", Microversion(25)), None);
        assert_eq!(
            group_key("member_of_NET-1", Microversion(33)),
            Some(("member_of", "_NET-1"))
        );
        assert_eq!(group_key("resources1@", Microversion(33)), None);
        assert_eq!(
            group_key(&format!("required{}", "x".repeat(65)), Microversion(39)),
            None
        );
    }

    #[test]
    fn schema_messages() {
        assert!(err("resources=VCPU:1&limit=5", 15).contains("'limit' was unexpected"));
        assert!(err("resources=VCPU:1&limit=0", 16).contains("Failed validating 'pattern'"));
        assert!(err("", 10).contains("'resources' is a required property"));
        let m = err("resources1@=VCPU:1", 33);
        assert!(m.contains("'resources1@' does not match any of the regexes"));
        assert!(m.contains("'^member_of([a-zA-Z0-9_-]{1,64})?$'"));
        assert!(err("resources=VCPU:1&group_policy=bogus", 25)
            .contains("'bogus' is not one of ['none', 'isolate']"));
        assert!(err("resources=VCPU:1&root_required=FOO", 34)
            .contains("'root_required' does not match any of the regexes"));
    }

    #[test]
    fn group_messages() {
        assert!(err("resources=", 10).contains("Got: empty string."));
        assert!(err("required=FOO&required1=BAR", 25)
            .contains("Found the following orphaned traits keys: required, required1"));
        assert!(err("resources1=VCPU:1&resources2=VCPU:1", 25)
            .contains("The \"group_policy\" parameter is required"));
        assert!(err("group_policy=isolate", 25).contains("At least one request group"));
        assert!(err("group_policy=isolate", 36).contains("There must be at least one"));
        assert!(err("resources1=VCPU:1&required2=FOO&group_policy=none", 36)
            .contains("bad group(s) - ['2']."));
        assert!(err("resources=VCPU:1&required=FOO,!FOO", 22)
            .contains("following traits keys: required: (FOO)"));
        assert!(err("resources=VCPU:1&required=in:A,B", 38).contains("since microversion 1.39"));
        assert!(err("resources=VCPU:1&member_of=!in:x", 32)
            .contains("Expected 'member_of' parameter to contain valid UUID(s). Got: x"));
    }

    #[test]
    fn a_full_request_maps_to_the_engine() {
        let a = Uuid::new_v4();
        let p = parse(
            &q(&format!(
                "resources=VCPU:1&required=in:A,B&required=!C&member_of=!{a}\
                 &resources_X=VF:2&required_X=D&limit=10&limit=3&group_policy=isolate\
                 &root_required=E,!F"
            )),
            Microversion(39),
        )
        .unwrap()
        .request;
        assert_eq!(p.limit, Some(10));
        assert_eq!(p.group_policy, GroupPolicy::Isolate);
        assert_eq!(p.root_required, vec!["E".to_owned()]);
        assert_eq!(p.root_forbidden, vec!["F".to_owned()]);
        assert_eq!(p.groups.len(), 2);
        assert_eq!(
            p.groups[0].required,
            vec![vec!["A".to_owned(), "B".to_owned()]]
        );
        assert_eq!(p.groups[0].forbidden, vec!["C".to_owned()]);
        assert_eq!(p.groups[0].forbidden_aggregates, vec![AggregateUuid(a)]);
        assert_eq!(p.groups[1].suffix, "_X");
        assert!(p.nested_aware);
    }
}
