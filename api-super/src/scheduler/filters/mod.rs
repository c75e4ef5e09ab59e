//! Host filters: each one a [`Filter`] in its own file. A filter sees one
//! candidate host and the request and says whether the host may take it.

pub mod aggregate_instance_extra_specs;
pub mod availability_zone;
pub mod compute;
pub mod forced_host;
pub mod image_properties;
pub mod requested_destination;
pub mod server_group_affinity;
pub mod server_group_anti_affinity;

use super::{Candidate, Request};

/// A host filter.
pub trait Filter: Send + Sync + std::fmt::Debug {
    /// Its name, as in Nova's `enabled_filters` (`ComputeFilter`, ...).
    fn name(&self) -> &'static str;
    /// Whether `host` passes for `req`.
    fn passes(&self, host: &Candidate, req: &Request) -> bool;
}

/// The filters enabled by default, in order.
pub fn defaults() -> Vec<Box<dyn Filter>> {
    vec![
        Box::new(forced_host::ForcedHostFilter),
        Box::new(requested_destination::RequestedDestinationFilter),
        Box::new(compute::ComputeFilter),
        Box::new(availability_zone::AvailabilityZoneFilter),
        Box::new(image_properties::ImagePropertiesFilter),
        Box::new(aggregate_instance_extra_specs::AggregateInstanceExtraSpecsFilter),
        Box::new(server_group_affinity::ServerGroupAffinityFilter),
        Box::new(server_group_anti_affinity::ServerGroupAntiAffinityFilter),
    ]
}
