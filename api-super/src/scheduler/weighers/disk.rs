//! `DiskWeigher`: free disk (placement `DISK_GB` capacity minus usage), as
//! Nova's.

use super::Weigher;
use crate::scheduler::{Candidate, Request};

/// Weighs by free DISK_GB; multiplier `disk_weight_multiplier`.
#[derive(Debug, Clone, Copy)]
pub struct DiskWeigher {
    /// > 0 spreads, < 0 packs.
    pub multiplier: f64,
}

impl Weigher for DiskWeigher {
    fn name(&self) -> &'static str {
        "DiskWeigher"
    }

    fn multiplier(&self) -> f64 {
        self.multiplier
    }

    fn weigh(&self, host: &Candidate, _req: &Request) -> f64 {
        host.free("DISK_GB")
    }
}
