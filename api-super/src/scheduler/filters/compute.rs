//! `ComputeFilter`: the host's compute service is up and enabled.

use super::Filter;
use crate::scheduler::{Candidate, Request};

/// Passes hosts whose compute service is up and not disabled.
#[derive(Debug, Clone, Copy, Default)]
pub struct ComputeFilter;

impl Filter for ComputeFilter {
    fn name(&self) -> &'static str {
        "ComputeFilter"
    }

    fn passes(&self, host: &Candidate, _req: &Request) -> bool {
        host.info.service_up && !host.info.service_disabled
    }
}
