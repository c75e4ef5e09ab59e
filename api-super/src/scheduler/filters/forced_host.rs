//! Forced host (`availability_zone = "az:host"`, admins only): only that
//! host (Nova applies this before the other filters).

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
        match &req.force_host {
            None => true,
            Some(h) => host.info.host == *h,
        }
    }
}
