//! Requested destination (2.74 `host` / `hypervisor_hostname` in the
//! create body, admins only): only that host (and node) passes. Unlike a
//! forced host (`az:host`), every other filter still runs, as upstream.

use super::Filter;
use crate::scheduler::{Candidate, Request};

/// Passes only the requested host and node, when one is requested.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestedDestinationFilter;

impl Filter for RequestedDestinationFilter {
    fn name(&self) -> &'static str {
        "RequestedDestinationFilter"
    }

    fn passes(&self, host: &Candidate, req: &Request) -> bool {
        host.info
            .is_named(req.requested_host.as_deref(), req.requested_node.as_deref())
    }
}
