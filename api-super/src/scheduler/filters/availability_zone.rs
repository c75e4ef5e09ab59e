//! `AvailabilityZoneFilter`: the host is in the requested zone.

use super::Filter;
use crate::scheduler::{Candidate, Request};

/// Passes every host when no zone is requested, else the zone's hosts.
#[derive(Debug, Clone, Copy, Default)]
pub struct AvailabilityZoneFilter;

impl Filter for AvailabilityZoneFilter {
    fn name(&self) -> &'static str {
        "AvailabilityZoneFilter"
    }

    fn passes(&self, host: &Candidate, req: &Request) -> bool {
        match &req.availability_zone {
            None => true,
            Some(az) => host.info.availability_zone == *az,
        }
    }
}
