//! The allocation-candidates request, already parsed from the query string,
//! plus helpers that parse upstream's `required`/`member_of` value syntax.

use std::collections::BTreeMap;
use std::str::FromStr;

use fabric::ids::ProviderUuid;
use uuid::Uuid;

use super::error::EngineError;
use super::index::AggregateUuid;

/// One request group: the unsuffixed group has `suffix == ""`
/// (`use_same_provider = false`); a suffixed (granular) group must be
/// satisfied by a single provider.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestGroup {
    /// `""` for the unsuffixed group, else the granular suffix (`"1"`, `"_NET"`).
    pub suffix: String,
    /// Resource class name → amount (each ≥ 1).
    pub resources: BTreeMap<String, u64>,
    /// Required traits: AND of any-of sets (`required=A,B` gives `[[A],[B]]`,
    /// `required=in:A,B` gives `[[A,B]]`).
    pub required: Vec<Vec<String>>,
    /// Forbidden traits (`!T`).
    pub forbidden: Vec<String>,
    /// `member_of`: AND of any-of aggregate sets.
    pub member_of: Vec<Vec<AggregateUuid>>,
    /// Forbidden aggregates (`member_of=!in:A,B` / `member_of=!A`).
    pub forbidden_aggregates: Vec<AggregateUuid>,
    /// `in_tree`: restrict to the tree containing this provider.
    pub in_tree: Option<ProviderUuid>,
}

impl RequestGroup {
    /// An unsuffixed group requesting `resources`.
    pub fn unsuffixed<S: Into<String>>(resources: impl IntoIterator<Item = (S, u64)>) -> Self {
        Self::suffixed("", resources)
    }

    /// A granular group with `suffix` requesting `resources`.
    pub fn suffixed<S: Into<String>>(
        suffix: &str,
        resources: impl IntoIterator<Item = (S, u64)>,
    ) -> Self {
        Self {
            suffix: suffix.to_owned(),
            resources: resources.into_iter().map(|(k, v)| (k.into(), v)).collect(),
            ..Self::default()
        }
    }

    /// Whether the group must be satisfied by one provider.
    pub fn use_same_provider(&self) -> bool {
        !self.suffix.is_empty()
    }
}

/// `group_policy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GroupPolicy {
    /// Granular groups may share providers.
    #[default]
    None,
    /// Each granular group on a different provider.
    Isolate,
}

/// How candidates are ordered before `limit` is applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CandidateOrder {
    /// Deterministic: by anchor root (provider creation order), then by
    /// provider order inside the tree. Lets the engine stop at `limit`.
    #[default]
    Deterministic,
    /// Upstream's `randomize_allocation_candidates = True`: a random sample
    /// of `limit` (or a shuffle of all), reproducible from `seed`.
    Shuffle {
        /// PRNG seed.
        seed: u64,
    },
}

/// `GET /allocation_candidates`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidatesRequest {
    /// The unsuffixed group (if any) and the granular groups.
    pub groups: Vec<RequestGroup>,
    /// `group_policy`.
    pub group_policy: GroupPolicy,
    /// `same_subtree` (1.36): each entry a list of suffixes.
    pub same_subtree: Vec<Vec<String>>,
    /// `root_required` (1.35): traits the tree's root must have.
    pub root_required: Vec<String>,
    /// `root_required=!T` (1.35): traits the tree's root must not have.
    pub root_forbidden: Vec<String>,
    /// `limit`.
    pub limit: Option<usize>,
    /// Ordering before `limit`.
    pub order: CandidateOrder,
    /// False below microversion 1.29: candidates using more than one
    /// provider of the same tree are dropped.
    pub nested_aware: bool,
}

impl Default for CandidatesRequest {
    fn default() -> Self {
        Self {
            groups: Vec::new(),
            group_policy: GroupPolicy::None,
            same_subtree: Vec::new(),
            root_required: Vec::new(),
            root_forbidden: Vec::new(),
            limit: None,
            order: CandidateOrder::Deterministic,
            nested_aware: true,
        }
    }
}

impl CandidatesRequest {
    /// A request with just these groups.
    pub fn new(groups: Vec<RequestGroup>) -> Self {
        Self {
            groups,
            ..Self::default()
        }
    }
}

/// Required and forbidden traits of one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraitFilter {
    /// AND of any-of sets.
    pub required: Vec<Vec<String>>,
    /// None of these.
    pub forbidden: Vec<String>,
}

/// Parses the values of the repeated `required[N]` parameter
/// (`A,!B`, `in:A,B`; microversion checks belong to the HTTP layer).
pub fn parse_required<S: AsRef<str>>(values: &[S]) -> Result<TraitFilter, EngineError> {
    let mut out = TraitFilter::default();
    for v in values {
        let v = v.as_ref();
        let bad = || EngineError::InvalidRequest(format!("invalid required value {v:?}"));
        if let Some(list) = v.strip_prefix("in:") {
            let set: Vec<String> = list.split(',').map(str::to_owned).collect();
            if set.iter().any(|t| t.is_empty() || t.starts_with('!')) {
                return Err(bad());
            }
            out.required.push(set);
        } else {
            for t in v.split(',') {
                match t.strip_prefix('!') {
                    Some("") => return Err(bad()),
                    Some(f) => out.forbidden.push(f.to_owned()),
                    None if t.is_empty() => return Err(bad()),
                    None => out.required.push(vec![t.to_owned()]),
                }
            }
        }
    }
    Ok(out)
}

/// Aggregate filter of one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AggregateFilter {
    /// AND of any-of sets.
    pub member_of: Vec<Vec<AggregateUuid>>,
    /// None of these.
    pub forbidden: Vec<AggregateUuid>,
}

/// Parses the values of the repeated `member_of[N]` parameter
/// (`A`, `in:A,B`, `!A`, `!in:A,B`).
pub fn parse_member_of<S: AsRef<str>>(values: &[S]) -> Result<AggregateFilter, EngineError> {
    let mut out = AggregateFilter::default();
    let uuids = |s: &str| -> Result<Vec<AggregateUuid>, EngineError> {
        s.split(',')
            .map(|u| {
                Uuid::from_str(u).map(AggregateUuid).map_err(|_| {
                    EngineError::InvalidRequest(format!("invalid aggregate UUID {u:?}"))
                })
            })
            .collect()
    };
    for v in values {
        let v = v.as_ref();
        if let Some(rest) = v.strip_prefix('!') {
            let list = rest.strip_prefix("in:").unwrap_or(rest);
            out.forbidden.extend(uuids(list)?);
        } else {
            let list = v.strip_prefix("in:").unwrap_or(v);
            out.member_of.push(uuids(list)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_syntax() {
        let f = parse_required(&["A,!B", "in:C,D"]).unwrap();
        assert_eq!(
            f.required,
            vec![vec!["A".to_owned()], vec!["C".into(), "D".into()]]
        );
        assert_eq!(f.forbidden, vec!["B".to_owned()]);
        assert!(parse_required(&["in:A,!B"]).is_err());
        assert!(parse_required(&[",,"]).is_err());
        assert!(parse_required(&[""]).is_err());
    }

    #[test]
    fn member_of_syntax() {
        let a = Uuid::new_v4();
        let b = Uuid::new_v4();
        let f = parse_member_of(&[format!("in:{a},{b}"), format!("!{b}"), a.to_string()]).unwrap();
        assert_eq!(f.member_of.len(), 2);
        assert_eq!(f.member_of[0].len(), 2);
        assert_eq!(f.forbidden, vec![AggregateUuid(b)]);
        assert!(parse_member_of(&["in:nope"]).is_err());
    }
}
