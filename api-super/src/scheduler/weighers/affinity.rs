//! `ServerGroupSoftAffinityWeigher` and `ServerGroupSoftAntiAffinityWeigher`:
//! for `soft-affinity` groups, hosts with more of the group's members
//! weigh more; for `soft-anti-affinity`, hosts with fewer. Other requests
//! weigh the same everywhere (0).

use super::Weigher;
use crate::scheduler::{Candidate, Request};

/// Packs a `soft-affinity` group; multiplier
/// `soft_affinity_weight_multiplier`.
#[derive(Debug, Clone, Copy)]
pub struct SoftAffinityWeigher {
    /// >= 0.
    pub multiplier: f64,
}

impl Weigher for SoftAffinityWeigher {
    fn name(&self) -> &'static str {
        "ServerGroupSoftAffinityWeigher"
    }

    fn multiplier(&self) -> f64 {
        self.multiplier
    }

    fn weigh(&self, host: &Candidate, req: &Request) -> f64 {
        match &req.group {
            Some(g) if g.policy == "soft-affinity" => g.members_on(&host.info.host) as f64,
            _ => 0.0,
        }
    }
}

/// Spreads a `soft-anti-affinity` group; multiplier
/// `soft_anti_affinity_weight_multiplier`.
#[derive(Debug, Clone, Copy)]
pub struct SoftAntiAffinityWeigher {
    /// >= 0.
    pub multiplier: f64,
}

impl Weigher for SoftAntiAffinityWeigher {
    fn name(&self) -> &'static str {
        "ServerGroupSoftAntiAffinityWeigher"
    }

    fn multiplier(&self) -> f64 {
        self.multiplier
    }

    fn weigh(&self, host: &Candidate, req: &Request) -> f64 {
        match &req.group {
            Some(g) if g.policy == "soft-anti-affinity" => -(g.members_on(&host.info.host) as f64),
            _ => 0.0,
        }
    }
}
