//! `GET /resource_providers` filters.

use std::collections::BTreeMap;

use fabric::ids::ProviderUuid;

use super::error::EngineError;
use super::index::{AggregateUuid, Index};
use super::request::RequestGroup;

/// Filters of `GET /resource_providers`. Every filter applies to the
/// provider itself (no tree or sharing semantics), as upstream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderFilter {
    /// `uuid=`.
    pub uuid: Option<ProviderUuid>,
    /// `name=`.
    pub name: Option<String>,
    /// `in_tree=`.
    pub in_tree: Option<ProviderUuid>,
    /// `resources=`: capacity for each amount (min/max/step and free space).
    pub resources: BTreeMap<String, u64>,
    /// `required=`: AND of any-of sets.
    pub required: Vec<Vec<String>>,
    /// `required=!T`.
    pub forbidden: Vec<String>,
    /// `member_of=`: AND of any-of sets.
    pub member_of: Vec<Vec<AggregateUuid>>,
    /// `member_of=!…`.
    pub forbidden_aggregates: Vec<AggregateUuid>,
}

impl Index {
    /// Providers matching `filter`, in index order.
    pub fn list_providers(
        &self,
        filter: &ProviderFilter,
    ) -> Result<Vec<ProviderUuid>, EngineError> {
        if let Some((rc, _)) = filter.resources.iter().find(|(_, &a)| a == 0) {
            return Err(EngineError::InvalidRequest(format!(
                "amount of {rc} must be at least 1"
            )));
        }
        let group = RequestGroup {
            suffix: "1".into(),
            resources: filter.resources.clone(),
            required: filter.required.clone(),
            forbidden: filter.forbidden.clone(),
            member_of: filter.member_of.clone(),
            forbidden_aggregates: filter.forbidden_aggregates.clone(),
            in_tree: filter.in_tree,
        };
        let g = self.compile(&group);
        if g.impossible {
            return Ok(Vec::new());
        }
        let only = match &filter.uuid {
            Some(u) => match self.slot(u) {
                Some(s) => Some(s),
                None => return Ok(Vec::new()),
            },
            None => None,
        };
        let set = self.single_provider_set(&g);
        Ok(set
            .iter()
            .filter(|&s| only.is_none_or(|o| o == s))
            .filter(|&s| {
                let p = self.p(s);
                filter.name.as_deref().is_none_or(|n| &*p.name == n)
                    && g.in_tree_root.is_none_or(|r| r == p.root)
                    && self.fits_all(s, &g.resources)
            })
            .map(|s| self.p(s).uuid)
            .collect())
    }
}
