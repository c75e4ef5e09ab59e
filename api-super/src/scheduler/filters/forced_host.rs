//! Forced host and node (`availability_zone = "az:host"`, `"az:host:node"`
//! or `"az::node"`, admins only): only that host or node (Nova applies
//! this before the other filters).

use super::Filter;
use crate::scheduler::{Candidate, Request};

/// Passes only the forced host, when one is forced.
#[derive(Debug, Clone, Copy, Default)]
pub struct ForcedHostFilter;

impl Filter for ForcedHostFilter {
    fn name(&self) -> &'static str {
        "ForcedHostFilter"
    }

    fn passes(&self, host: &Candidate, req: &Request) -> bool {
        req.force_host.is_none() && req.force_node.is_none()
            || host
                .info
                .is_named(req.force_host.as_deref(), req.force_node.as_deref())
    }
}
